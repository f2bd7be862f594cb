// Features through a real `sluice serve` and the C++ client: a dataset declaring list, scalar and
// bytes features and boxes lists them (ListDatasets, DescribeStream) in the schema's order, and
// every batch carries each record's values, read through ReceivedBatch's typed accessors, also
// from a taken batch after later ones arrived; an unlabeled dataset's batches carry no labels.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "formats/example_builder.h"
#include "formats/tfrecord_writer.h"
#include "sluice/v1/service.grpc.pb.h"
#include "tests/server/serve_fixture.h"

namespace sluice::serve_testing {
namespace {

constexpr int kRecords = 12;

// Record r: label r, tags [r, r+1, ...] (r % 3 of them), caption "rec-r", score r / 2, one box
// [0.1, 0.2, 0.4, 0.6] of class r + 100 (none in every fourth record).
void WriteFeatureShard(const TempDir& dir) {
  auto writer = TFRecordWriter::Create(dir.file("features.tfrecord"));
  REQUIRE(writer.ok());
  ExampleBuilder b;
  std::string record;
  for (int r = 0; r < kRecords; ++r) {
    const std::string jpeg = testing::IdJpeg(r);
    const std::string caption = "rec-" + std::to_string(r);
    b.AddBytes("image/encoded", jpeg);
    b.AddInt64("image/class/label", r);
    std::vector<int64_t> tags;
    for (int k = 0; k < r % 3; ++k) tags.push_back(r + k);
    b.AddInt64s("tags", tags);
    b.AddBytes("caption", caption);
    b.AddFloats("score", {static_cast<float>(r) / 2});
    const bool box = r % 4 != 0;
    b.AddFloats("image/object/bbox/xmin", box ? std::vector<float>{0.1f} : std::vector<float>{});
    b.AddFloats("image/object/bbox/ymin", box ? std::vector<float>{0.2f} : std::vector<float>{});
    b.AddFloats("image/object/bbox/xmax", box ? std::vector<float>{0.4f} : std::vector<float>{});
    b.AddFloats("image/object/bbox/ymax", box ? std::vector<float>{0.6f} : std::vector<float>{});
    b.AddInt64s("image/object/class/label",
                box ? std::vector<int64_t>{r + 100} : std::vector<int64_t>{});
    b.Finish(&record);
    REQUIRE((*writer)->Write(record).ok());
  }
  REQUIRE((*writer)->Close().ok());
}

struct FeatureServer {
  FeatureServer() {
    WriteFeatureShard(dir);
    const std::string pipeline =
        "    files: \"" + dir.file("features.tfrecord") +
        "\"\n    batch_size: 5\n    image_height: 32\n    image_width: 40\n    threads: 2\n"
        "    mode: MODE_EVAL\n    epochs: 1\n    memory_budget_bytes: 67108864\n"
        "    transforms { resize { size: 32 size: 40 } }\n"
        "    transforms { flip { horizontal_p: 1 } }\n";
    testing::WriteAll(dir.file("sluice.textproto"),
                      "listen: \"127.0.0.1:0\"\n"
                      "datasets {\n  name: \"train\"\n  num_classes: 1000\n  pipeline {\n" +
                          pipeline +
                          "    features { key: \"tags\" type: FEATURE_TYPE_INT64 }\n"
                          "    features { key: \"caption\" type: FEATURE_TYPE_BYTES shape: "
                          "FEATURE_SHAPE_SCALAR }\n"
                          "    features { key: \"score\" name: \"half\" type: FEATURE_TYPE_FLOAT "
                          "shape: FEATURE_SHAPE_SCALAR }\n"
                          "    boxes { enabled: true }\n  }\n}\n"
                          "datasets {\n  name: \"bare\"\n  pipeline {\n" +
                          pipeline + "    unlabeled: true\n  }\n}\n");
    server = std::make_unique<testing::ServerProcess>(
        std::vector<std::string>{"--config", dir.file("sluice.textproto")});
    REQUIRE(server->running());
  }
  TempDir dir;
  std::unique_ptr<testing::ServerProcess> server;
};

v1::StreamRequest WithIds(const std::string& dataset) {
  v1::StreamRequest r = Request(dataset);
  r.set_record_ids(true);
  return r;
}

std::vector<std::string> Names(const google::protobuf::RepeatedPtrField<v1::FeatureInfo>& f) {
  std::vector<std::string> out;
  for (const v1::FeatureInfo& i : f) out.push_back(i.name());
  return out;
}

TEST_CASE("ListDatasetsAndDescribeStreamNameEveryFeatureArrayInTheSchemasOrder") {
  FeatureServer s;
  auto client = Connect(s.server->address());
  auto infos = client->ListDatasets();
  REQUIRE(infos.ok());
  std::map<std::string, v1::DatasetInfo> by_name;
  for (const v1::DatasetInfo& i : *infos) by_name[i.name()] = i;
  const std::vector<std::string> expected = {"tags", "caption", "half", "boxes", "box_labels"};
  const v1::DatasetInfo& train = by_name["train"];
  CHECK(Names(train.features()) == expected);
  CHECK_FALSE(train.unlabeled());
  CHECK(train.features(0).ragged());
  CHECK(train.features(1).type() == v1::FEATURE_TYPE_BYTES);
  CHECK_FALSE(train.features(2).ragged());
  CHECK(train.features(3).type() == v1::FEATURE_TYPE_FLOAT);
  CHECK(std::vector<int32_t>(train.features(3).row_shape().begin(),
                             train.features(3).row_shape().end()) == std::vector<int32_t>{4});
  CHECK(by_name["bare"].unlabeled());
  CHECK(by_name["bare"].features_size() == 0);

  auto stub = Stub(s.server->address());
  for (const char* dataset : {"train", "bare"}) {
    grpc::ClientContext context;
    v1::StreamPlan plan;
    REQUIRE(stub->DescribeStream(&context, Request(dataset), &plan).ok());
    CHECK(Names(plan.features()) == Names(by_name[dataset].features()));
    CHECK(plan.unlabeled() == (std::string(dataset) == "bare"));
  }
}

TEST_CASE("EveryBatchCarriesEachRecordsFeaturesThroughTheTypedAccessors") {
  FeatureServer s;
  // Through the socket and through same-host shared memory (features ride in the message).
  for (const bool shared_memory : {false, true}) {
    INFO("shared_memory " << shared_memory);
    ClientOptions options;
    options.targets = {s.server->address()};
    options.shared_memory = shared_memory;
    options.max_held = 8;
    auto client = Client::Create(options);
    REQUIRE(client.ok());
    auto stream = (*client)->Stream(WithIds("train"));
    INFO(stream.status().ToString());
    REQUIRE(stream.ok());
    std::vector<bool> seen(kRecords, false);
    std::vector<ReceivedBatch> taken;
    for (;;) {
      ReceivedBatch b;
      bool end = false;
      REQUIRE((*stream)->Take(&b, &end).ok());
      if (end) break;
      REQUIRE(b.features.size() == 5);
      CHECK(b.feature("nope") == nullptr);
      taken.push_back(std::move(b));
    }
    // Every taken batch holds its features until its lease goes, whatever came after it.
    for (const ReceivedBatch& b : taken) {
      const ReceivedFeature* tags = b.feature("tags");
      const ReceivedFeature* caption = b.feature("caption");
      const ReceivedFeature* half = b.feature("half");
      const ReceivedFeature* boxes = b.feature("boxes");
      const ReceivedFeature* box_labels = b.feature("box_labels");
      REQUIRE(tags != nullptr);
      REQUIRE(caption != nullptr);
      REQUIRE(half != nullptr);
      REQUIRE(boxes != nullptr);
      REQUIRE(box_labels != nullptr);
      CHECK(tags->ragged());
      CHECK_FALSE(half->ragged());
      for (int i = 0; i < b.meta.n; ++i) {
        const int r = static_cast<int>(b.record_indexes[static_cast<size_t>(i)]);
        INFO("record " << r);
        REQUIRE(r < kRecords);
        seen[static_cast<size_t>(r)] = true;
        CHECK(b.labels[static_cast<size_t>(i)] == r);
        const std::span<const int64_t> t = tags->int64s(static_cast<size_t>(i));
        REQUIRE(t.size() == static_cast<size_t>(r % 3));
        for (size_t k = 0; k < t.size(); ++k) CHECK(t[k] == r + static_cast<int64_t>(k));
        CHECK(caption->bytes(static_cast<size_t>(i)) == "rec-" + std::to_string(r));
        CHECK(half->floats(static_cast<size_t>(i))[0] == static_cast<float>(r) / 2);
        const std::span<const float> box = boxes->floats(static_cast<size_t>(i));
        const std::span<const int64_t> box_label = box_labels->int64s(static_cast<size_t>(i));
        if (r % 4 == 0) {
          CHECK(box.empty());
          CHECK(box_label.empty());
          continue;
        }
        // A plain resize keeps normalized boxes; the flip mirrors x.
        REQUIRE(box.size() == 4);
        CHECK(box[0] == Approx(0.6).margin(1e-5));
        CHECK(box[1] == Approx(0.2).margin(1e-5));
        CHECK(box[2] == Approx(0.9).margin(1e-5));
        CHECK(box[3] == Approx(0.6).margin(1e-5));
        REQUIRE(box_label.size() == 1);
        CHECK(box_label[0] == r + 100);
      }
    }
    CHECK(std::count(seen.begin(), seen.end(), true) == kRecords);
    CHECK(((*stream)->shared_memory_batches() > 0) == shared_memory);
  }
}

TEST_CASE("AnUnlabeledDatasetsBatchesCarryNoLabels") {
  FeatureServer s;
  auto client = Connect(s.server->address());
  auto stream = client->Stream(WithIds("bare"));
  REQUIRE(stream.ok());
  int images = 0;
  for (;;) {
    ReceivedBatch b;
    bool end = false;
    REQUIRE((*stream)->Next(&b, &end).ok());
    if (end) break;
    CHECK(b.labels.empty());
    CHECK(b.features.empty());
    CHECK(b.record_indexes.size() == static_cast<size_t>(b.meta.n));
    images += b.meta.n;
  }
  CHECK(images == kRecords);
  // Any protobuf parser sees the same: no labels field at all.
  const Raw raw = ReadRaw(s.server->address(), Request("bare"));
  REQUIRE(raw.status.ok());
  REQUIRE_FALSE(raw.batches.empty());
  for (const v1::Batch& b : raw.batches) CHECK(b.labels_size() == 0);
}

}  // namespace
}  // namespace sluice::serve_testing

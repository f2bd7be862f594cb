// What a transform set makes of batches, through the C++ client against a real `sluice serve`:
// a normalized bfloat16 NCHW set delivers the default recipe's images normalized, with
// dtype(), layout() and shape() saying so, over the socket and shared memory alike; a mixup set
// delivers each sample's pair and weight; a set the dataset does not offer is refused by name.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/client/client_test_support.h"

namespace sluice {
namespace {

using testing::ServerProcess;
using testing::TempDir;

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

// The test shards (160 records, labels = record ids) served as "train" with transform sets:
// "bf16", the default recipe normalized into bfloat16 NCHW; "mixup", the default with mixup.
struct ServedSets {
  TempDir dir;
  testing::TestShards shards = testing::WriteTestShards(dir, 4, 40);
  std::string config = [this] {
    const std::string path = dir.file("sluice.textproto");
    testing::WriteAll(
        path,
        "listen: \"127.0.0.1:0\"\n"
        "datasets {\n  name: \"train\"\n  num_classes: 160\n"
        "  pipeline {\n    files: \"" +
            dir.file("shard-*.tfrecord") +
            "\"\n    batch_size: 8\n    image_height: 32\n    image_width: 40\n"
            "    threads: 2\n  }\n"
            "  transform_sets {\n    name: \"bf16\"\n"
            "    transforms { preset: PRESET_IMAGENET_TRAIN }\n"
            "    transforms { normalize { mean: [0.485, 0.456, 0.406] "
            "std: [0.229, 0.224, 0.225] } }\n"
            "    transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } }\n"
            "  }\n"
            "  transform_sets {\n    name: \"mixup\"\n"
            "    transforms { preset: PRESET_IMAGENET_TRAIN }\n"
            "    transforms { mixup { alpha: 0.4 } }\n  }\n}\n");
    return path;
  }();
  ServerProcess server{{"--config", config}};
};

// What a batch holds, kept after its buffers go back.
struct Kept {
  DType dtype;
  Layout layout;
  std::array<int64_t, 4> shape;
  std::vector<int32_t> labels, mixed_labels;
  std::vector<float> label_weights;
  std::string images;
};

std::vector<Kept> Stream(Client& client, const std::string& transform_set) {
  v1::StreamRequest r = testing::Request();
  r.set_transform_set(transform_set);
  auto stream = client.Stream(r);
  REQUIRE(stream.ok());
  std::vector<Kept> out;
  for (;;) {
    ReceivedBatch b;
    bool end = false;
    REQUIRE((*stream)->Next(&b, &end).ok());
    if (end) return out;
    REQUIRE(b.images.size() == b.meta.image_bytes());
    out.push_back({b.dtype(), b.layout(), b.shape(),
                   std::vector<int32_t>(b.labels.begin(), b.labels.end()),
                   std::vector<int32_t>(b.mixed_labels.begin(), b.mixed_labels.end()),
                   std::vector<float>(b.label_weights.begin(), b.label_weights.end()),
                   std::string(reinterpret_cast<const char*>(b.images.data()), b.images.size())});
  }
}

float BFloat16At(const std::string& images, size_t i) {
  uint16_t half;
  std::memcpy(&half, images.data() + 2 * i, 2);
  const uint32_t bits = uint32_t{half} << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

TEST_CASE("Bf16NchwSetDeliversTheDefaultRecipeNormalizedOverSocketAndSharedMemory") {
  ServedSets served;
  REQUIRE(served.server.running());
  for (bool shared : {false, true}) {
    INFO((shared ? "shared memory" : "socket"));
    auto client = testing::Connect(served.server, 2, 4, nullptr, shared);
    const std::vector<Kept> plain = Stream(*client, "");
    const std::vector<Kept> bf16 = Stream(*client, "bf16");
    REQUIRE(plain.size() == static_cast<size_t>(testing::kBatches));
    REQUIRE(bf16.size() == plain.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      INFO("batch " << k);
      const Kept& p = plain[k];
      const Kept& b = bf16[k];
      CHECK(p.dtype == DType::kUint8);
      CHECK(p.layout == Layout::kNhwc);
      CHECK(p.shape == std::array<int64_t, 4>{8, 32, 40, 3});
      CHECK(b.dtype == DType::kBFloat16);
      CHECK(b.layout == Layout::kNchw);
      CHECK(b.shape == std::array<int64_t, 4>{8, 3, 32, 40});
      REQUIRE(b.images.size() == size_t{8} * 3 * 32 * 40 * 2);
      CHECK(b.labels == p.labels);
      CHECK(b.mixed_labels.empty());
      // Pixel (n, y, x, c) of the uint8 batch is (n, c, y, x) of the bf16 one: within one uint8
      // step (the fused pass need not round to uint8 first) and bfloat16's 8 bits.
      size_t worst = 0;
      float worst_error = 0;
      for (size_t i = 0; i < p.images.size(); ++i) {
        const size_t c = i % 3, x = i / 3 % 40, y = i / 120 % 32, n = i / (120 * 32);
        const float want = (static_cast<uint8_t>(p.images[i]) / 255.0f - kMean[c]) / kStd[c];
        const float got = BFloat16At(b.images, ((n * 3 + c) * 32 + y) * 40 + x);
        const float error = std::abs(got - want) - std::ldexp(std::abs(want), -8);
        if (error > worst_error) {
          worst_error = error;
          worst = i;
        }
      }
      INFO("worst at byte " << worst);
      CHECK(worst_error <= 1.01f / 255 / kStd[1]);
    }
  }
}

TEST_CASE("MixupSetDeliversEachSamplesPairAndOneWeightPerBatch") {
  ServedSets served;
  REQUIRE(served.server.running());
  auto client = testing::Connect(served.server);
  const std::vector<Kept> batches = Stream(*client, "mixup");
  REQUIRE(batches.size() == static_cast<size_t>(testing::kBatches));
  for (const Kept& b : batches) {
    CHECK(b.dtype == DType::kUint8);
    REQUIRE(b.mixed_labels.size() == 8);
    REQUIRE(b.label_weights.size() == 8);
    // torchvision's MixUp: sample i is mixed with sample i - 1, one lambda per batch.
    for (size_t i = 0; i < 8; ++i) {
      CHECK(b.mixed_labels[i] == b.labels[(i + 7) % 8]);
      CHECK(b.label_weights[i] == b.label_weights[0]);
      CHECK(b.label_weights[i] >= 0.0f);
      CHECK(b.label_weights[i] <= 1.0f);
    }
  }
}

TEST_CASE("ASetTheDatasetDoesNotOfferIsRefusedNamingIt") {
  ServedSets served;
  REQUIRE(served.server.running());
  auto client = testing::Connect(served.server);
  v1::StreamRequest r = testing::Request();
  r.set_transform_set("bf17");
  auto stream = client->Stream(r);
  REQUIRE_FALSE(stream.ok());
  CHECK(stream.status().code() == StatusCode::kInvalidArgument);
  CHECK(stream.status().message().find("bf17") != std::string::npos);
}

// The test shards served as "train" whose set "x" is the default recipe with `output` (the
// fields of an OutputOp).
struct ServedSetX {
  explicit ServedSetX(const std::string& output)
      : config([&] {
          const std::string path = dir.file("sluice.textproto");
          testing::WriteAll(path,
                            "listen: \"127.0.0.1:0\"\n"
                            "datasets {\n  name: \"train\"\n  num_classes: 160\n"
                            "  pipeline {\n    files: \"" +
                                dir.file("shard-*.tfrecord") +
                                "\"\n    batch_size: 8\n    image_height: 32\n"
                                "    image_width: 40\n    threads: 2\n  }\n"
                                "  transform_sets {\n    name: \"x\"\n"
                                "    transforms { preset: PRESET_IMAGENET_TRAIN }\n"
                                "    transforms { output { " +
                                output + " } }\n  }\n}\n");
          return path;
        }()) {}
  TempDir dir;
  testing::TestShards shards = testing::WriteTestShards(dir, 4, 40);
  std::string config;
  ServerProcess server{{"--config", config}};
};

TEST_CASE("FanInOverServersWhoseSetDiffersInDtypeFailsNamingBothServersAndFormats") {
  for (const bool shared : {false, true}) {
    ServedSetX bf16("dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW");
    ServedSetX f32("dtype: DTYPE_FLOAT32 layout: LAYOUT_NHWC");
    REQUIRE(bf16.server.running());
    REQUIRE(f32.server.running());
    ClientOptions o;
    o.targets = {bf16.server.address(), f32.server.address()};
    o.shared_memory = shared;
    o.reconnect_deadline = std::chrono::milliseconds(3000);
    auto client = Client::Create(o);
    REQUIRE(client.ok());
    v1::StreamRequest r = testing::Request();
    r.set_transform_set("x");
    auto stream = (*client)->Stream(r);
    REQUIRE(stream.ok());
    Status failed;
    for (;;) {
      ReceivedBatch b;
      bool end = false;
      failed = (*stream)->Next(&b, &end);
      if (!failed.ok() || end) break;
    }
    CAPTURE(shared, failed.message());
    REQUIRE(failed.code() == StatusCode::kFailedPrecondition);
    for (const std::string& want : {std::string("bfloat16 NCHW"), std::string("float32 NHWC"),
                                    bf16.server.address(), f32.server.address()}) {
      CHECK(failed.message().find(want) != std::string::npos);
    }
    // The stream stays failed.
    ReceivedBatch b;
    bool end = false;
    CHECK((*stream)->Next(&b, &end).code() == StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace sluice

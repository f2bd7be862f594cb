// A Batch with features and without labels through DecodeBatch: the features the server wrote
// before the images (socket) or before the shared-memory reference come back typed, an unlabeled
// batch (no labels) is accepted besides one with N, and a malformed feature fails the batch.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "client/wire/batch_wire.h"
#include "sluice/v1/service.pb.h"
#include "tests/client/wire/batch_wire_test_support.h"

namespace sluice {
namespace {

using wire_testing::Buffer;
using wire_testing::DecodeStatus;
using wire_testing::ServerBuffer;

BatchMeta Meta(int32_t n) {
  BatchMeta m;
  m.epoch = 2;
  m.index = 5;
  m.end_record = 9;
  m.n = n;
  m.height = 2;
  m.width = 3;
  return m;
}

const std::vector<ArrayInfo> kArrays = {{"caption", FeatureType::kBytes, false, {}},
                                        {"boxes", FeatureType::kFloat, true, {4}},
                                        {"box_labels", FeatureType::kInt64, true, {}}};

// Two samples: "a" with one box, "" with none.
std::string Features() {
  std::vector<SampleFeatures> s(2);
  s[0].arrays.resize(3);
  s[1].arrays.resize(3);
  s[0].arrays[0].data = "a";
  s[0].arrays[0].sizes = {1};
  s[0].arrays[0].rows = 1;
  s[1].arrays[0].sizes = {0};
  s[1].arrays[0].rows = 1;
  const float box[4] = {0.1f, 0.2f, 0.5f, 0.75f};
  s[0].arrays[1].data.assign(reinterpret_cast<const char*>(box), sizeof(box));
  s[0].arrays[1].rows = 1;
  const int64_t label = 3;
  s[0].arrays[2].data.assign(reinterpret_cast<const char*>(&label), sizeof(label));
  s[0].arrays[2].rows = 1;
  std::string out;
  EncodeFeatureArrays(kArrays, s, &out);
  return out;
}

void CheckFeatures(const BatchArrays& a) {
  REQUIRE(a.feature_count == 3);
  CHECK(a.features[0].name == "caption");
  CHECK(a.features[0].bytes(0) == "a");
  CHECK(a.features[0].bytes(1).empty());
  CHECK(a.features[1].row_lengths == std::vector<int32_t>{1, 0});
  CHECK(std::vector<float>(a.features[1].floats(0).begin(), a.features[1].floats(0).end()) ==
        std::vector<float>{0.1f, 0.2f, 0.5f, 0.75f});
  CHECK(a.features[1].floats(1).empty());
  CHECK(a.features[2].int64s(0)[0] == 3);
}

TEST_CASE("FeaturesAndNoLabelsDecodeOnTheSocketAndSharedMemoryEncodings") {
  const BatchMeta m = Meta(2);
  const std::string features = Features();
  BatchExtras extras;
  extras.features = features;
  const std::string images(m.image_bytes(), '\x11');

  grpc::ByteBuffer socket = ServerBuffer(m, {}, images, extras);
  BatchMeta got;
  BatchArrays arrays;
  REQUIRE(DecodeBatch(&socket, &got, &arrays).ok());
  CHECK(arrays.labels.empty());
  CHECK(got.n == 2);
  CheckFeatures(arrays);

  grpc::ByteBuffer shared = Buffer(EncodeSharedBatch(m, {}, 1, extras));
  REQUIRE(DecodeBatch(&shared, &got, &arrays).ok());
  CHECK(arrays.shared);
  CHECK(arrays.shared_slot == 1);
  CheckFeatures(arrays);

  // Any protobuf parser reads the socket encoding's features as Batch.features.
  std::string whole = EncodeBatchPrefix(m, std::vector<int32_t>{4, 5}, extras) + images;
  v1::Batch b;
  REQUIRE(b.ParseFromString(whole));
  REQUIRE(b.features_size() == 3);
  CHECK(b.features(0).name() == "caption");
  CHECK(b.images() == images);
  CHECK(b.labels_size() == 2);
  grpc::ByteBuffer labeled = Buffer(whole);
  REQUIRE(DecodeBatch(&labeled, &got, &arrays).ok());
  CHECK(arrays.labels == std::vector<int32_t>{4, 5});
  CheckFeatures(arrays);
}

TEST_CASE("ABatchWithoutFeaturesAfterOneWithThemHasNone") {
  const BatchMeta m = Meta(2);
  const std::string features = Features();
  BatchExtras extras;
  extras.features = features;
  const std::string images(m.image_bytes(), '\x11');
  BatchMeta got;
  BatchArrays arrays;
  grpc::ByteBuffer with = ServerBuffer(m, {1, 2}, images, extras);
  REQUIRE(DecodeBatch(&with, &got, &arrays).ok());
  grpc::ByteBuffer without = ServerBuffer(m, {1, 2}, images);
  REQUIRE(DecodeBatch(&without, &got, &arrays).ok());
  CHECK(arrays.feature_count == 0);
}

TEST_CASE("LabelsOfAnotherCountOrAMalformedFeatureAreDataLoss") {
  const BatchMeta m = Meta(2);
  const std::string images(m.image_bytes(), '\x11');
  std::string one_label = EncodeBatchPrefix(m, std::vector<int32_t>{4}) + images;
  CHECK(DecodeStatus(one_label).code() == StatusCode::kDataLoss);
  CHECK_THAT(DecodeStatus(one_label).message(), Catch::Contains("1 labels for 2 images"));

  // Features of another batch size: three samples' row_lengths in a batch of two.
  std::vector<SampleFeatures> three(3);
  for (SampleFeatures& s : three) s.arrays.resize(1);
  std::string features;
  EncodeFeatureArrays({{"tags", FeatureType::kInt64, true, {}}}, three, &features);
  BatchExtras extras;
  extras.features = features;
  const std::string bad = EncodeBatchPrefix(m, std::vector<int32_t>{}, extras) + images;
  CHECK(DecodeStatus(bad).code() == StatusCode::kDataLoss);
  CHECK_THAT(DecodeStatus(bad).message(),
             Catch::Contains("feature 'tags': row_lengths holds 3 values for 2 samples"));

  // Mixed labels say what share of labels[i] a sample is: without labels they mean nothing.
  const std::vector<int32_t> mixed = {1, 0};
  const std::vector<float> weights = {0.5f, 1};
  BatchExtras mix;
  mix.mixed_labels = mixed;
  mix.label_weights = weights;
  const std::string unlabeled_mix = EncodeBatchPrefix(m, std::vector<int32_t>{}, mix) + images;
  CHECK_THAT(DecodeStatus(unlabeled_mix).message(), Catch::Contains("mixed_labels without labels"));
}

// A batch of n = 0 with `count` valid features (no rows, no values: 8 bytes each on the wire).
std::string ZeroSampleBatchWithFeatures(int count) {
  v1::Batch b;
  for (int d : {0, 2, 3, 3}) b.add_shape(d);
  for (int k = 0; k < count; ++k) {
    v1::FeatureArray* f = b.add_features();
    f->set_name("f" + std::to_string(k));
    f->set_type(v1::FEATURE_TYPE_INT64);
  }
  return b.SerializeAsString();
}

// Every field-12 entry took a string and a ReceivedFeature before any was checked: 16 MiB of
// tiny entries cost ~2 GB. Past a schema's 4096 arrays the batch is refused as it is read.
TEST_CASE("MoreFeaturesThanASchemaHoldsAreDataLossAsTheyAreRead") {
  const Status s = DecodeStatus(ZeroSampleBatchWithFeatures(kMaxFeatureArrays + 1));
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK_THAT(s.message(), Catch::Contains("features: over 4096 arrays"));

  grpc::ByteBuffer b = Buffer(ZeroSampleBatchWithFeatures(kMaxFeatureArrays));
  BatchMeta got;
  BatchArrays arrays;
  REQUIRE(DecodeBatch(&b, &got, &arrays).ok());
  CHECK(arrays.feature_count == static_cast<size_t>(kMaxFeatureArrays));
}

}  // namespace
}  // namespace sluice

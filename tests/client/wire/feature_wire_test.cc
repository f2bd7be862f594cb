// Batch.features on the wire (client/wire/feature_wire.h): what EncodeFeatureArrays writes is what
// protobuf writes for the same FeatureArray messages, DecodeFeatureArray reads every type and
// shape back, and each malformed array is DataLoss naming the feature and what is wrong.
#include "client/wire/feature_wire.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sluice/v1/service.pb.h"

namespace sluice {
namespace {

template <typename T>
std::string Raw(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Sample values of one array: numeric rows, or bytes values.
FeatureValues Numeric(std::string data, uint32_t rows) {
  FeatureValues v;
  v.data = std::move(data);
  v.rows = rows;
  return v;
}
FeatureValues Bytes(const std::vector<std::string>& values, uint32_t rows) {
  FeatureValues v;
  for (const std::string& s : values) {
    v.data += s;
    v.sizes.push_back(static_cast<uint32_t>(s.size()));
  }
  v.rows = rows;
  return v;
}

// Every type and shape a schema makes, in its arrays() order, with three samples: empty rows in
// each ragged array, empty bytes values.
const std::vector<ArrayInfo> kArrays = {
    {"id", FeatureType::kInt64, false, {}},      {"embedding", FeatureType::kFloat, false, {3}},
    {"caption", FeatureType::kBytes, false, {}}, {"pair", FeatureType::kBytes, false, {2}},
    {"tags", FeatureType::kInt64, true, {}},     {"words", FeatureType::kBytes, true, {}},
    {"boxes", FeatureType::kFloat, true, {4}},   {"box_labels", FeatureType::kInt64, true, {}},
};

std::vector<SampleFeatures> Samples() {
  std::vector<SampleFeatures> s(3);
  s[0].arrays = {Numeric(Raw<int64_t>({-5}), 1),
                 Numeric(Raw<float>({0.5f, 1.5f, -2}), 1),
                 Bytes({"a cat"}, 1),
                 Bytes({"x", ""}, 1),
                 Numeric(Raw<int64_t>({1, 2, int64_t{1} << 40}), 3),
                 Bytes({"", "dog"}, 2),
                 Numeric(Raw<float>({0.1f, 0.2f, 0.3f, 0.4f}), 1),
                 Numeric(Raw<int64_t>({7}), 1)};
  s[1].arrays = {Numeric(Raw<int64_t>({0}), 1),
                 Numeric(Raw<float>({0, 0, 0}), 1),
                 Bytes({""}, 1),
                 Bytes({"", ""}, 1),
                 Numeric("", 0),
                 Bytes({}, 0),
                 Numeric("", 0),
                 Numeric("", 0)};
  s[2].arrays = {Numeric(Raw<int64_t>({9}), 1),
                 Numeric(Raw<float>({1, 2, 3}), 1),
                 Bytes({std::string("\0\xff", 2)}, 1),
                 Bytes({"yy", "z"}, 1),
                 Numeric(Raw<int64_t>({4}), 1),
                 Bytes({"hen"}, 1),
                 Numeric(Raw<float>({0, 0, 1, 1, 0.25f, 0.5f, 0.75f, 1}), 2),
                 Numeric(Raw<int64_t>({1, 2}), 2)};
  return s;
}

// What protobuf's own serializer writes for the same arrays.
v1::Batch ProtobufBatch(const std::vector<ArrayInfo>& arrays,
                        const std::vector<SampleFeatures>& samples) {
  v1::Batch b;
  for (size_t a = 0; a < arrays.size(); ++a) {
    v1::FeatureArray* f = b.add_features();
    f->set_name(arrays[a].name);
    f->set_type(static_cast<v1::FeatureType>(arrays[a].type));
    for (int32_t d : arrays[a].row_shape) f->add_row_shape(d);
    for (const SampleFeatures& s : samples) {
      const FeatureValues& v = s.arrays[a];
      if (arrays[a].ragged) f->add_row_lengths(static_cast<int32_t>(v.rows));
      f->mutable_values()->append(v.data);
      for (uint32_t size : v.sizes) f->add_value_lengths(static_cast<int32_t>(size));
    }
  }
  return b;
}

std::string Encoded(const std::vector<ArrayInfo>& arrays,
                    const std::vector<SampleFeatures>& samples) {
  std::string out;
  EncodeFeatureArrays(arrays, samples, &out);
  return out;
}

TEST_CASE("EncodedFeaturesAreTheBytesProtobufWritesForTheSameMessages") {
  const std::vector<SampleFeatures> samples = Samples();
  const std::string encoded = Encoded(kArrays, samples);
  const v1::Batch expected = ProtobufBatch(kArrays, samples);
  CHECK(encoded == expected.SerializeAsString());
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(encoded));
  CHECK(parsed.SerializeAsString() == expected.SerializeAsString());
  REQUIRE(parsed.features_size() == static_cast<int>(kArrays.size()));
  CHECK(parsed.features(6).name() == "boxes");
  CHECK(std::vector<int32_t>(parsed.features(6).row_lengths().begin(),
                             parsed.features(6).row_lengths().end()) ==
        std::vector<int32_t>{1, 0, 2});
  // Appended to an existing message, the arrays follow what is there.
  std::string more = "x";
  EncodeFeatureArrays(kArrays, samples, &more);
  CHECK(more == "x" + encoded);
}

TEST_CASE("EveryTypeAndShapeRoundTripsWithEmptyRowsAndEmptyBytes") {
  const std::vector<SampleFeatures> samples = Samples();
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(Encoded(kArrays, samples)));
  std::vector<ReceivedFeature> got(kArrays.size());
  for (size_t a = 0; a < kArrays.size(); ++a) {
    INFO(kArrays[a].name);
    REQUIRE(DecodeFeatureArray(parsed.features(static_cast<int>(a)).SerializeAsString(), 3, &got[a])
                .ok());
    CHECK(got[a].name == kArrays[a].name);
    CHECK(got[a].type == kArrays[a].type);
    CHECK(got[a].row_shape == kArrays[a].row_shape);
    CHECK(got[a].ragged() == kArrays[a].ragged);
  }
  CHECK(std::vector<int64_t>(got[0].int64s().begin(), got[0].int64s().end()) ==
        std::vector<int64_t>{-5, 0, 9});
  CHECK(std::vector<float>(got[1].floats(2).begin(), got[1].floats(2).end()) ==
        std::vector<float>{1, 2, 3});
  CHECK(got[2].bytes_count() == 3);
  CHECK(got[2].bytes(0) == "a cat");
  CHECK(got[2].bytes(1).empty());
  CHECK(got[2].bytes(2) == std::string_view("\0\xff", 2));
  CHECK(got[3].bytes_count() == 6);
  CHECK(got[3].bytes(4) == "yy");
  CHECK(got[3].bytes(5) == "z");
  // Ragged: row_lengths, each sample's rows, empty rows.
  CHECK(got[4].row_lengths == std::vector<int32_t>{3, 0, 1});
  CHECK(got[4].row_splits == std::vector<int64_t>{0, 3, 3, 4});
  CHECK(got[4].int64s(0).size() == 3);
  CHECK(got[4].int64s(0)[2] == int64_t{1} << 40);
  CHECK(got[4].int64s(1).empty());
  CHECK(got[4].int64s(2)[0] == 4);
  CHECK(got[5].row_lengths == std::vector<int32_t>{2, 0, 1});
  CHECK(got[5].bytes(0).empty());
  CHECK(got[5].bytes(1) == "dog");
  CHECK(got[5].bytes(2) == "hen");
  CHECK(got[6].rows_of(2) == std::pair<int64_t, int64_t>{1, 3});
  CHECK(std::vector<float>(got[6].floats(2).begin(), got[6].floats(2).end()) ==
        std::vector<float>{0, 0, 1, 1, 0.25f, 0.5f, 0.75f, 1});
  CHECK(got[6].floats(1).empty());
  CHECK(std::vector<int64_t>(got[7].int64s(2).begin(), got[7].int64s(2).end()) ==
        std::vector<int64_t>{1, 2});
}

TEST_CASE("ABatchOfZeroSamplesHasEveryArrayWithNoRows") {
  const std::string encoded = Encoded(kArrays, {});
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(encoded));
  CHECK(encoded == ProtobufBatch(kArrays, {}).SerializeAsString());
  REQUIRE(parsed.features_size() == static_cast<int>(kArrays.size()));
  for (const v1::FeatureArray& f : parsed.features()) {
    ReceivedFeature got;
    REQUIRE(DecodeFeatureArray(f.SerializeAsString(), 0, &got).ok());
    CHECK(got.values.empty());
    CHECK(got.int64s().empty());
  }
  CHECK(Encoded({}, Samples()).empty());
}

TEST_CASE("ADecodedFeatureIsReusedWithoutKeepingTheLastOnesValues") {
  const std::vector<SampleFeatures> samples = Samples();
  v1::Batch parsed;
  REQUIRE(parsed.ParseFromString(Encoded(kArrays, samples)));
  ReceivedFeature f;
  REQUIRE(DecodeFeatureArray(parsed.features(5).SerializeAsString(), 3, &f).ok());
  REQUIRE(DecodeFeatureArray(parsed.features(0).SerializeAsString(), 3, &f).ok());
  CHECK(f.name == "id");
  CHECK_FALSE(f.ragged());
  CHECK(f.value_lengths.empty());
  CHECK(f.int64s().size() == 3);
}

TEST_CASE("ValuesShorterThanAShortStringAreReadInPlaceAligned") {
  // One int64 and one float: 8 and 4 bytes, which a std::string could keep in its own object.
  for (const auto& [info, data] : std::vector<std::pair<ArrayInfo, std::string>>{
           {{"one", FeatureType::kInt64, false, {}}, Raw<int64_t>({-7})},
           {{"f", FeatureType::kFloat, false, {}}, Raw<float>({2.5f})}}) {
    std::vector<SampleFeatures> s(1);
    s[0].arrays = {Numeric(data, 1)};
    v1::Batch parsed;
    REQUIRE(parsed.ParseFromString(Encoded({info}, s)));
    ReceivedFeature f;
    REQUIRE(DecodeFeatureArray(parsed.features(0).SerializeAsString(), 1, &f).ok());
    CHECK(reinterpret_cast<uintptr_t>(f.values.data()) % alignof(int64_t) == 0);
    if (info.type == FeatureType::kInt64) CHECK(f.int64s(0)[0] == -7);
    if (info.type == FeatureType::kFloat) CHECK(f.floats(0)[0] == 2.5f);
  }
}

// A FeatureArray as any sender may write it.
v1::FeatureArray Array(const std::string& name, v1::FeatureType type) {
  v1::FeatureArray f;
  f.set_name(name);
  f.set_type(type);
  return f;
}

TEST_CASE("MalformedFeatureArraysAreDataLossNamingTheFeatureAndWhatIsWrong") {
  struct Case {
    const char* what;
    std::string message;
    int32_t n;
    const char* expected;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, const v1::FeatureArray& f, int32_t n, const char* expected) {
    cases.push_back({what, f.SerializeAsString(), n, expected});
  };
  v1::FeatureArray f = Array("t", v1::FEATURE_TYPE_UNSPECIFIED);
  add("no type", f, 0, "feature 't': type 0 is not a known FeatureType");
  f = Array("t", static_cast<v1::FeatureType>(9));
  add("unknown type", f, 0, "feature 't': type 9 is not a known FeatureType");
  f = Array("emb", v1::FEATURE_TYPE_FLOAT);
  f.add_row_shape(-3);
  add("negative row_shape", f, 0, "feature 'emb': row_shape[0] is -3");
  f = Array("tags", v1::FEATURE_TYPE_INT64);
  f.add_row_lengths(1);
  f.add_row_lengths(-1);
  f.add_row_lengths(1);
  f.set_values(Raw<int64_t>({1}));
  add("negative row_lengths", f, 3, "feature 'tags': row_lengths[1] is -1");
  f = Array("tags", v1::FEATURE_TYPE_INT64);
  f.add_row_lengths(1);
  f.add_row_lengths(1);
  f.set_values(Raw<int64_t>({1, 2}));
  add("row_lengths for fewer samples", f, 3, "feature 'tags': row_lengths holds 2 values for 3");
  f = Array("id", v1::FEATURE_TYPE_INT64);
  f.set_values(Raw<int64_t>({1, 2}));
  add("values for fewer rows", f, 3,
      "feature 'id': values holds 16 bytes, 3 rows of 1 int64 values need 24");
  f = Array("emb", v1::FEATURE_TYPE_FLOAT);
  f.add_row_shape(2);
  f.set_values(std::string(9, '\0'));
  add("values not whole floats", f, 1,
      "feature 'emb': values holds 9 bytes, 1 rows of 2 float values need 8");
  f = Array("id", v1::FEATURE_TYPE_INT64);
  f.set_values(Raw<int64_t>({1}));
  f.add_value_lengths(8);
  add("value_lengths on a number", f, 1, "feature 'id': value_lengths on a int64 array");
  f = Array("cap", v1::FEATURE_TYPE_BYTES);
  f.set_values("abc");
  f.add_value_lengths(1);
  f.add_value_lengths(1);
  add("value_lengths short of the bytes", f, 2,
      "feature 'cap': value_lengths add up to 2 bytes, values holds 3");
  f = Array("cap", v1::FEATURE_TYPE_BYTES);
  f.set_values("abc");
  f.add_value_lengths(3);
  add("value_lengths for fewer values", f, 2,
      "feature 'cap': value_lengths holds 1 values for 2 rows of 1 bytes values");
  f = Array("cap", v1::FEATURE_TYPE_BYTES);
  f.set_values("abc");
  f.add_value_lengths(4);
  f.add_value_lengths(-1);
  add("negative value_lengths", f, 2, "feature 'cap': value_lengths[1] is -1");
  f = Array("cap", v1::FEATURE_TYPE_BYTES);
  f.set_values("abc");
  f.add_value_lengths(3);
  std::string cut = f.SerializeAsString();
  cut.pop_back();
  cases.push_back({"cut short", cut, 1, "feature 'cap': value_lengths"});
  cases.push_back(
      {"values wire type", std::string("\x0a\x01q\x28\x05", 5), 1, "feature 'q': values"});

  for (const Case& c : cases) {
    INFO(c.what);
    ReceivedFeature got;
    const Status s = DecodeFeatureArray(c.message, c.n, &got);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK_THAT(s.message(), Catch::Contains(c.expected));
  }
}

// Shapes the schema never produces (a dimension of 0 or over 65536, over 4 dimensions): with 0
// values they passed every count check, and a row count of 2^31 - 1 or a product past 2^63 then
// reached the caller (row_values() overflowed, a reader built 2^31 rows).
TEST_CASE("RowShapesOutsideTheSchemasBoundsAreDataLossNamingTheFeature") {
  struct Case {
    const char* what;
    v1::FeatureArray f;
    int32_t n;
    const char* expected;
  };
  std::vector<Case> cases;
  v1::FeatureArray f = Array("cap", v1::FEATURE_TYPE_BYTES);
  f.add_row_shape(0);
  f.add_row_lengths(2147483647);
  cases.push_back({"a 0 dimension with 2^31 - 1 rows", f, 1,
                   "feature 'cap': row_shape[0] is 0, outside [1, 65536]"});
  f = Array("emb", v1::FEATURE_TYPE_FLOAT);
  for (int d : {0, 1 << 30, 1 << 30, 1 << 30}) f.add_row_shape(d);
  cases.push_back({"2^90 values a row after a 0", f, 2, "feature 'emb': row_shape[0] is 0"});
  f = Array("emb", v1::FEATURE_TYPE_FLOAT);
  for (int d : {1 << 30, 1 << 30, 1 << 30, 0}) f.add_row_shape(d);
  cases.push_back({"2^90 values a row before a 0", f, 2,
                   "feature 'emb': row_shape[0] is 1073741824, outside [1, 65536]"});
  f = Array("emb", v1::FEATURE_TYPE_INT64);
  f.add_row_shape(65537);
  f.add_row_lengths(0);
  cases.push_back({"a dimension over 65536", f, 1, "feature 'emb': row_shape[0] is 65537"});
  f = Array("emb", v1::FEATURE_TYPE_INT64);
  for (int d = 0; d < 5; ++d) f.add_row_shape(1);
  f.set_values(Raw<int64_t>({7}));
  cases.push_back({"five dimensions", f, 1, "feature 'emb': row_shape has 5 dimensions, over 4"});
  f = Array("emb", v1::FEATURE_TYPE_INT64);
  for (int d = 0; d < 4; ++d) f.add_row_shape(65536);
  f.add_row_lengths(0);
  cases.push_back({"2^64 values a row", f, 1, "feature 'emb': row_shape holds over 2147483647"});
  for (const Case& c : cases) {
    INFO(c.what);
    ReceivedFeature got;
    const Status s = DecodeFeatureArray(c.f.SerializeAsString(), c.n, &got);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK_THAT(s.message(), Catch::Contains(c.expected));
  }

  // The bounds themselves are a schema's shapes: 4 dimensions of up to 65536, 2^31 - 1 values.
  f = Array("emb", v1::FEATURE_TYPE_INT64);
  for (int d : {65536, 32767, 1, 1}) f.add_row_shape(d);
  f.add_row_lengths(0);
  ReceivedFeature got;
  REQUIRE(DecodeFeatureArray(f.SerializeAsString(), 1, &got).ok());
  CHECK(got.row_values() == int64_t{65536} * 32767);
}

}  // namespace
}  // namespace sluice

#include "formats/sample_features.h"

#include <google/protobuf/text_format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "sluice/v1/example.pb.h"

namespace sluice {
namespace {

FeatureSchema Schema(const std::string& text) {
  v1::PipelineOptions o;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &o));
  Result<FeatureSchema> s = CompileFeatureSchema(o);
  REQUIRE(s.ok());
  return *s;
}

// A record as TensorFlow writes one (packed numeric lists), from an Example in text format.
std::string Record(const std::string& text) {
  v1::Example e;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &e));
  return e.SerializeAsString();
}

// Hand-written protobuf, for what TensorFlow's writer does not produce but a parse accepts:
// unpacked lists, a key repeated, a Feature that changes kind, Features split in two.
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutLen(std::string* out, uint32_t field, std::string_view data) {
  PutVarint(out, (uint64_t{field} << 3) | 2);
  PutVarint(out, data.size());
  out->append(data);
}
std::string UnpackedInt64s(const std::vector<int64_t>& values) {
  std::string list;
  for (int64_t v : values) {
    PutVarint(&list, 1 << 3);
    PutVarint(&list, static_cast<uint64_t>(v));
  }
  std::string feature;
  PutLen(&feature, 3, list);
  return feature;
}
std::string UnpackedFloats(const std::vector<float>& values) {
  std::string list;
  for (float v : values) {
    PutVarint(&list, (1 << 3) | 5);
    list.append(reinterpret_cast<const char*>(&v), 4);
  }
  std::string feature;
  PutLen(&feature, 2, list);
  return feature;
}
std::string BytesFeature(const std::vector<std::string>& values) {
  std::string list;
  for (const std::string& v : values) PutLen(&list, 1, v);
  std::string feature;
  PutLen(&feature, 1, list);
  return feature;
}
// One Features message of map entries (key, serialized Feature), in order.
std::string Features(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string features;
  for (const auto& [key, feature] : entries) {
    std::string entry;
    PutLen(&entry, 1, key);
    PutLen(&entry, 2, feature);
    PutLen(&features, 1, entry);
  }
  std::string example;
  PutLen(&example, 1, features);
  return example;
}

std::vector<int64_t> Int64s(const FeatureValues& a) {
  std::vector<int64_t> v(a.data.size() / 8);
  std::memcpy(v.data(), a.data.data(), v.size() * 8);
  return v;
}
std::vector<float> Floats(const FeatureValues& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), v.size() * 4);
  return v;
}
std::vector<std::string> Strings(const FeatureValues& a) {
  std::vector<std::string> v;
  size_t at = 0;
  for (uint32_t size : a.sizes) {
    v.push_back(a.data.substr(at, size));
    at += size;
  }
  CHECK(at == a.data.size());
  return v;
}

// The message Extract refuses `record` with (InvalidArgument); fails the test when it does not.
std::string Refusal(const FeatureSchema& schema, const std::string& record) {
  FeatureExtractor extract(schema);
  SampleFeatures out;
  Status s = extract.Extract(record, &out);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  return s.message();
}

constexpr const char* kEveryShape = R"pb(
  features { key: "ids" type: FEATURE_TYPE_INT64 }
  features { key: "scores" type: FEATURE_TYPE_FLOAT }
  features { key: "tags" type: FEATURE_TYPE_BYTES }
  features { key: "count" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR }
  features { key: "weight" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_SCALAR }
  features { key: "caption" type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_SCALAR }
  features { key: "pos" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_FIXED length: 2 }
  features { key: "rgb" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_FIXED length: 3 }
  features { key: "pair" type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_FIXED length: 2 }
  features {
    key: "ids"
    name: "classes"
    type: FEATURE_TYPE_INT64
    shape: FEATURE_SHAPE_MULTI_HOT
    length: 6
  }
)pb";

TEST_CASE("EveryShapeAndTypeIsReadInSchemaOrder") {
  const FeatureSchema schema = Schema(kEveryShape);
  const std::string record = Record(R"pb(
    features {
      feature {
        key: "ids"
        value { int64_list { value: [ 5, 0, 3, 3 ] } }
      }
      feature {
        key: "scores"
        value { float_list { value: [ 0.5, -1.25 ] } }
      }
      feature {
        key: "tags"
        value { bytes_list { value: [ "cat", "", "a\0b" ] } }
      }
      feature {
        key: "count"
        value { int64_list { value: 9007199254740993 } }
      }
      feature {
        key: "weight"
        value { float_list { value: 2.5 } }
      }
      feature {
        key: "caption"
        value { bytes_list { value: "a dog on a mat" } }
      }
      feature {
        key: "pos"
        value { int64_list { value: [ -1, 1 ] } }
      }
      feature {
        key: "rgb"
        value { float_list { value: [ 0.1, 0.2, 0.3 ] } }
      }
      feature {
        key: "pair"
        value { bytes_list { value: [ "left", "right" ] } }
      }
      feature {
        key: "image/encoded"
        value { bytes_list { value: "not read" } }
      }
    }
  )pb");
  FeatureExtractor extract(schema);
  SampleFeatures out;
  REQUIRE(extract.Extract(record, &out).ok());
  REQUIRE(out.arrays.size() == 10);
  CHECK(out.arrays[0].rows == 4);
  CHECK(Int64s(out.arrays[0]) == std::vector<int64_t>{5, 0, 3, 3});
  CHECK(out.arrays[0].sizes.empty());
  CHECK(out.arrays[1].rows == 2);
  CHECK(Floats(out.arrays[1]) == std::vector<float>{0.5f, -1.25f});
  CHECK(out.arrays[2].rows == 3);
  CHECK(Strings(out.arrays[2]) == std::vector<std::string>{"cat", "", std::string("a\0b", 3)});
  CHECK(out.arrays[3].rows == 1);
  CHECK(Int64s(out.arrays[3]) == std::vector<int64_t>{9007199254740993});  // not via a double
  CHECK(Floats(out.arrays[4]) == std::vector<float>{2.5f});
  CHECK(out.arrays[5].rows == 1);
  CHECK(Strings(out.arrays[5]) == std::vector<std::string>{"a dog on a mat"});
  CHECK(out.arrays[6].rows == 1);
  CHECK(Int64s(out.arrays[6]) == std::vector<int64_t>{-1, 1});
  CHECK(Floats(out.arrays[7]) == std::vector<float>{0.1f, 0.2f, 0.3f});
  CHECK(Strings(out.arrays[8]) == std::vector<std::string>{"left", "right"});
  // MULTI_HOT of the same key: a repeated index sets the same 1.
  CHECK(out.arrays[9].rows == 1);
  CHECK(Floats(out.arrays[9]) == std::vector<float>{1, 0, 0, 1, 0, 1});
}

TEST_CASE("MissingFeaturesTakeTheirDefaultsOrAreRefusedNamingTheKey") {
  const FeatureSchema schema = Schema(R"pb(
    features { key: "ids" type: FEATURE_TYPE_INT64 }
    features { key: "tags" type: FEATURE_TYPE_BYTES }
    features { key: "count" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR default_value: -3 }
    features {
      key: "weight"
      type: FEATURE_TYPE_FLOAT
      shape: FEATURE_SHAPE_SCALAR
      default_value: 0.25
    }
    features {
      key: "caption"
      type: FEATURE_TYPE_BYTES
      shape: FEATURE_SHAPE_SCALAR
      default_bytes: "(none)"
    }
    features {
      key: "rgb"
      type: FEATURE_TYPE_FLOAT
      shape: FEATURE_SHAPE_FIXED
      length: 3
      default_value: nan
    }
    features {
      key: "pair"
      type: FEATURE_TYPE_BYTES
      shape: FEATURE_SHAPE_FIXED
      length: 2
      default_bytes: "?"
    }
    features {
      key: "classes"
      type: FEATURE_TYPE_INT64
      shape: FEATURE_SHAPE_MULTI_HOT
      length: 3
      allow_missing: true
    }
  )pb");
  // An empty Feature (no list set) is missing too, as tf.io.parse_example reads it.
  const std::string record = Features({{"other", BytesFeature({"x"})}, {"rgb", ""}});
  FeatureExtractor extract(schema);
  SampleFeatures out;
  REQUIRE(extract.Extract(record, &out).ok());
  CHECK(out.arrays[0].rows == 0);  // LIST: an empty row, as tf.io.VarLenFeature
  CHECK(out.arrays[0].data.empty());
  CHECK(out.arrays[1].rows == 0);
  CHECK(out.arrays[1].sizes.empty());
  CHECK(out.arrays[2].rows == 1);
  CHECK(Int64s(out.arrays[2]) == std::vector<int64_t>{-3});
  CHECK(Floats(out.arrays[3]) == std::vector<float>{0.25f});
  CHECK(Strings(out.arrays[4]) == std::vector<std::string>{"(none)"});
  const std::vector<float> rgb = Floats(out.arrays[5]);
  REQUIRE(rgb.size() == 3);
  CHECK((std::isnan(rgb[0]) && std::isnan(rgb[1]) && std::isnan(rgb[2])));
  CHECK(Strings(out.arrays[6]) == std::vector<std::string>{"?", "?"});
  CHECK(out.arrays[7].rows == 1);
  CHECK(Floats(out.arrays[7]) == std::vector<float>{0, 0, 0});

  // Without defaults each is refused, naming the key and the record's keys.
  const std::string keys = "; its keys: other, rgb";
  CHECK(Refusal(Schema("features { key: 'count' type: FEATURE_TYPE_INT64 "
                       "shape: FEATURE_SHAPE_SCALAR }"),
                record) ==
        "feature 'count' missing from record; FEATURE_SHAPE_SCALAR needs its "
        "one value (or a default)" +
            keys);
  CHECK(Refusal(Schema("features { key: 'rgb' type: FEATURE_TYPE_FLOAT "
                       "shape: FEATURE_SHAPE_FIXED length: 3 }"),
                record) ==
        "feature 'rgb' has no value list (none of bytes_list, float_list, "
        "int64_list); FEATURE_SHAPE_FIXED needs its 3 values (or a default)" +
            keys);
  CHECK(Refusal(Schema("features { key: 'classes' type: FEATURE_TYPE_INT64 "
                       "shape: FEATURE_SHAPE_MULTI_HOT length: 3 }"),
                record) ==
        "feature 'classes' missing from record; FEATURE_SHAPE_MULTI_HOT needs "
        "its list of class indices (or allow_missing, for all 0)" +
            keys);
}

TEST_CASE("RepeatedKeysKeepTheLastEntryAsProtobufDoes") {
  const FeatureSchema schema = Schema(R"pb(
    features { key: "ids" type: FEATURE_TYPE_INT64 }
    features { key: "count" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR }
  )pb");
  // "ids" twice in one Features message, "count" once in each of two Features messages (which
  // merge); the earlier entries of another kind are replaced, not an error.
  std::string record = Features({{"ids", BytesFeature({"old"})},
                                 {"count", UnpackedInt64s({1})},
                                 {"ids", UnpackedInt64s({7, 8})}});
  record += Features({{"count", UnpackedInt64s({2})}});
  FeatureExtractor extract(schema);
  SampleFeatures out;
  REQUIRE(extract.Extract(record, &out).ok());
  CHECK(Int64s(out.arrays[0]) == std::vector<int64_t>{7, 8});
  CHECK(Int64s(out.arrays[1]) == std::vector<int64_t>{2});
  // The last entry of another kind is what counts.
  record = Features({{"ids", UnpackedInt64s({1})}, {"ids", UnpackedFloats({1})}});
  CHECK(Refusal(schema, record) == "feature 'ids' is float_list, expected int64_list");
}

TEST_CASE("PackedAndUnpackedNumericListsReadTheSame") {
  const FeatureSchema schema = Schema(R"pb(
    features { key: "i" type: FEATURE_TYPE_INT64 }
    features { key: "f" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_FIXED length: 3 }
  )pb");
  const std::string packed = Record(R"pb(
    features {
      feature {
        key: "i"
        value { int64_list { value: [ 1, -2, 300000000000 ] } }
      }
      feature {
        key: "f"
        value { float_list { value: [ 1.5, -0.0, 1e-40 ] } }
      }
    }
  )pb");
  const std::string unpacked = Features(
      {{"i", UnpackedInt64s({1, -2, 300000000000})}, {"f", UnpackedFloats({1.5f, -0.0f, 1e-40f})}});
  REQUIRE(packed != unpacked);
  FeatureExtractor extract(schema);
  SampleFeatures a, b;
  REQUIRE(extract.Extract(packed, &a).ok());
  REQUIRE(extract.Extract(unpacked, &b).ok());
  for (size_t i = 0; i < 2; ++i) {
    CHECK(a.arrays[i].data == b.arrays[i].data);
    CHECK(a.arrays[i].rows == b.arrays[i].rows);
  }
  CHECK(Int64s(a.arrays[0]) == std::vector<int64_t>{1, -2, 300000000000});
  // A feature with a packed run and an unpacked value in one list (protobuf concatenates them).
  std::string list;
  std::string run;
  PutVarint(&run, 4);
  PutVarint(&run, 5);
  PutLen(&list, 1, run);
  PutVarint(&list, 1 << 3);
  PutVarint(&list, 6);
  std::string feature;
  PutLen(&feature, 3, list);
  REQUIRE(extract.Extract(Features({{"i", feature}, {"f", UnpackedFloats({0, 0, 0})}}), &a).ok());
  CHECK(Int64s(a.arrays[0]) == std::vector<int64_t>{4, 5, 6});
}

TEST_CASE("WrongKindsAndCountsAreRefusedNamingKeyExpectedAndFound") {
  const FeatureSchema schema = Schema(kEveryShape);
  struct Case {
    const char* record;
    const char* message;
  };
  // A record that satisfies every column, then one feature replaced.
  const std::string good = R"pb(
    feature {
      key: "ids"
      value { int64_list { value: [ 1 ] } }
    }
    feature {
      key: "scores"
      value { float_list {} }
    }
    feature {
      key: "tags"
      value { bytes_list {} }
    }
    feature {
      key: "count"
      value { int64_list { value: 1 } }
    }
    feature {
      key: "weight"
      value { float_list { value: 1 } }
    }
    feature {
      key: "caption"
      value { bytes_list { value: "c" } }
    }
    feature {
      key: "pos"
      value { int64_list { value: [ 1, 2 ] } }
    }
    feature {
      key: "rgb"
      value { float_list { value: [ 1, 2, 3 ] } }
    }
    feature {
      key: "pair"
      value { bytes_list { value: [ "a", "b" ] } }
    }
  )pb";
  SampleFeatures out;
  REQUIRE(FeatureExtractor(schema).Extract(Record("features {" + good + "}"), &out).ok());
  const Case cases[] = {
      {R"pb(feature {
              key: "ids"
              value { float_list { value: 1 } }
            })pb",
       "feature 'ids' is float_list, expected int64_list"},
      // An empty list of another kind is still of another kind (tf.io.parse_example agrees).
      {R"pb(feature {
              key: "scores"
              value { int64_list {} }
            })pb",
       "feature 'scores' is int64_list, expected float_list"},
      {R"pb(feature {
              key: "tags"
              value { int64_list { value: 1 } }
            })pb",
       "feature 'tags' is int64_list, expected bytes_list"},
      {R"pb(feature {
              key: "count"
              value { bytes_list { value: "1" } }
            })pb",
       "feature 'count' is bytes_list, expected int64_list"},
      {R"pb(feature {
              key: "count"
              value { int64_list { value: [ 1, 2 ] } }
            })pb",
       "feature 'count' has 2 values, expected 1 (FEATURE_SHAPE_SCALAR)"},
      {R"pb(feature {
              key: "weight"
              value { float_list {} }
            })pb",
       "feature 'weight' has 0 values, expected 1 (FEATURE_SHAPE_SCALAR)"},
      {R"pb(feature {
              key: "caption"
              value { bytes_list { value: [ "a", "b", "c" ] } }
            })pb",
       "feature 'caption' has 3 values, expected 1 (FEATURE_SHAPE_SCALAR)"},
      {R"pb(feature {
              key: "pos"
              value { int64_list { value: [ 1 ] } }
            })pb",
       "feature 'pos' has 1 value, expected 2 (FEATURE_SHAPE_FIXED length 2)"},
      {R"pb(feature {
              key: "rgb"
              value { float_list { value: [ 1, 2, 3, 4 ] } }
            })pb",
       "feature 'rgb' has 4 values, expected 3 (FEATURE_SHAPE_FIXED length 3)"},
      {R"pb(feature {
              key: "pair"
              value { float_list { value: [ 1, 2 ] } }
            })pb",
       "feature 'pair' is float_list, expected bytes_list"},
      {R"pb(feature {
              key: "ids"
              value { int64_list { value: [ 6 ] } }
            })pb",
       "feature 'ids' has class index 6, outside [0, 6) (FEATURE_SHAPE_MULTI_HOT length 6)"},
      {R"pb(feature {
              key: "ids"
              value { int64_list { value: [ 2, -1 ] } }
            })pb",
       "feature 'ids' has class index -1, outside [0, 6) (FEATURE_SHAPE_MULTI_HOT length 6)"},
  };
  for (const Case& c : cases) {
    INFO(c.record);
    // The replacement comes last: its key's last entry.
    CHECK(Refusal(schema, Record("features {" + good + c.record + "}")) == c.message);
  }
}

TEST_CASE("MalformedRecordIsDataLossAndAMalformedListNamesItsKey") {
  const FeatureSchema schema = Schema("features { key: 'f' type: FEATURE_TYPE_FLOAT }");
  FeatureExtractor extract(schema);
  SampleFeatures out;
  Status s = extract.Extract(std::string("\x0a\x05\x0a", 3), &out);
  CHECK(s.code() == StatusCode::kDataLoss);
  // A packed float list of 3 bytes: the entry parses, its list does not.
  std::string list;
  PutLen(&list, 1, "abc");
  std::string feature;
  PutLen(&feature, 2, list);
  s = extract.Extract(Features({{"f", feature}}), &out);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().rfind("feature 'f': malformed tf.train.Example: ", 0) == 0);
}

constexpr const char* kBoxes = R"pb(
  features { key: "id" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR }
  boxes { enabled: true max_boxes: 3 }
)pb";

std::string BoxRecord(const std::vector<std::vector<float>>& coordinates,
                      const std::vector<int64_t>* labels) {
  v1::Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  (*f["id"].mutable_int64_list()->mutable_value()->Add()) = 1;
  const char* keys[4] = {"image/object/bbox/xmin", "image/object/bbox/ymin",
                         "image/object/bbox/xmax", "image/object/bbox/ymax"};
  for (int k = 0; k < 4; ++k) {
    auto* list = f[keys[k]].mutable_float_list();
    for (float v : coordinates[k]) list->add_value(v);
  }
  if (labels != nullptr) {
    auto* list = f["image/object/class/label"].mutable_int64_list();
    for (int64_t v : *labels) list->add_value(v);
  }
  return e.SerializeAsString();
}

TEST_CASE("BoxesAreReadAsRowsOfFourClampedWithTheirLabels") {
  const FeatureSchema schema = Schema(kBoxes);
  FeatureExtractor extract(schema);
  SampleFeatures out;
  const std::vector<int64_t> labels = {3, 1};
  REQUIRE(
      extract
          .Extract(BoxRecord({{0.1f, -0.5f}, {0.2f, 0.0f}, {0.6f, 1.5f}, {0.9f, 1.0f}}, &labels),
                   &out)
          .ok());
  REQUIRE(out.arrays.size() == 3);
  CHECK(out.arrays[1].rows == 2);
  // Each coordinate clamped to [0, 1].
  CHECK(Floats(out.arrays[1]) == std::vector<float>{0.1f, 0.2f, 0.6f, 0.9f, 0, 0, 1, 1});
  CHECK(out.arrays[2].rows == 2);
  CHECK(Int64s(out.arrays[2]) == labels);

  // Without a label list: labels 0.
  REQUIRE(extract.Extract(BoxRecord({{0.1f}, {0.2f}, {0.3f}, {0.4f}}, nullptr), &out).ok());
  CHECK(out.arrays[1].rows == 1);
  CHECK(Int64s(out.arrays[2]) == std::vector<int64_t>{0});
  // No box lists at all (an image without objects): no rows.
  REQUIRE(extract
              .Extract(Record(R"pb(features {
                                     feature {
                                       key: "id"
                                       value { int64_list { value: 1 } }
                                     }
                                   })pb"),
                       &out)
              .ok());
  CHECK(out.arrays[1].rows == 0);
  CHECK(out.arrays[2].rows == 0);
  // Empty lists: no rows either; as many boxes as max_boxes are fine.
  const std::vector<int64_t> none;
  REQUIRE(extract.Extract(BoxRecord({{}, {}, {}, {}}, &none), &out).ok());
  CHECK(out.arrays[1].rows == 0);
  const std::vector<int64_t> three = {0, 1, 2};
  REQUIRE(
      extract.Extract(BoxRecord({{0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}}, &three), &out).ok());
  CHECK(out.arrays[1].rows == 3);
  // A box inverted before clamping but not after (both sides past 1) is kept as clamped: empty.
  REQUIRE(extract.Extract(BoxRecord({{1.2f}, {0}, {1.1f}, {1}}, nullptr), &out).ok());
  CHECK(Floats(out.arrays[1]) == std::vector<float>{1, 0, 1, 1});
}

TEST_CASE("BadBoxesAreRefusedNamingTheBoxAndKeys") {
  const FeatureSchema schema = Schema(kBoxes);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<int64_t> one = {1}, two = {1, 2};
  struct Case {
    std::vector<std::vector<float>> boxes;
    const std::vector<int64_t>* labels;
    const char* message;
  };
  const Case cases[] = {
      {{{0.5f}, {0}, {0.2f}, {1}},
       nullptr,
       "box 0 of 1: xmin 0.5 > xmax 0.2 (features 'image/object/bbox/xmin', "
       "'image/object/bbox/xmax'; clamped to [0, 1])"},
      {{{0, 0}, {0, 0.75f}, {1, 1}, {1, 0.7f}},
       nullptr,
       "box 1 of 2: ymin 0.75 > ymax 0.7 (features 'image/object/bbox/ymin', "
       "'image/object/bbox/ymax'; clamped to [0, 1])"},
      {{{0}, {nan}, {1}, {1}},
       nullptr,
       "box 0 of 1: ymin nan (feature 'image/object/bbox/ymin') is not a finite coordinate"},
      {{{0}, {0}, {inf}, {1}},
       nullptr,
       "box 0 of 1: xmax inf (feature 'image/object/bbox/xmax') is not a finite coordinate"},
      {{{0, 0}, {0}, {1, 1}, {1, 1}},
       nullptr,
       "box coordinate lists differ in length: feature 'image/object/bbox/xmin' has 2 values, "
       "'image/object/bbox/ymin' has 1"},
      {{{0}, {0}, {1}, {}},
       nullptr,
       "box coordinate lists differ in length: feature 'image/object/bbox/xmin' has 1 values, "
       "'image/object/bbox/ymax' has 0"},
      {{{0}, {0}, {1}, {1}}, &two, "feature 'image/object/class/label' has 2 labels for 1 boxes"},
      {{{0, 0}, {0, 0}, {1, 1}, {1, 1}},
       &one,
       "feature 'image/object/class/label' has 1 labels for 2 boxes"},
      {{{0, 0, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}, {1, 1, 1, 1}},
       nullptr,
       "feature 'image/object/bbox/xmin' has 4 boxes, over boxes.max_boxes 3"},
  };
  for (const Case& c : cases) {
    INFO(c.message);
    CHECK(Refusal(schema, BoxRecord(c.boxes, c.labels)) == c.message);
  }
  // Compared after clamping: ymin 1.5 is 1, over ymax 0.5.
  CHECK(Refusal(schema, BoxRecord({{0}, {1.5f}, {1}, {0.5f}}, nullptr)) ==
        "box 0 of 1: ymin 1 > ymax 0.5 (features 'image/object/bbox/ymin', "
        "'image/object/bbox/ymax'; clamped to [0, 1])");
}

TEST_CASE("BoxListsOfAnotherKindAreRefused") {
  const FeatureSchema schema = Schema(kBoxes);
  CHECK(Refusal(schema, Record(R"pb(features {
                                      feature {
                                        key: "id"
                                        value { int64_list { value: 1 } }
                                      }
                                      feature {
                                        key: "image/object/bbox/ymin"
                                        value { int64_list { value: 0 } }
                                      }
                                    })pb")) ==
        "feature 'image/object/bbox/ymin' is int64_list, expected float_list");
  CHECK(Refusal(schema, Record(R"pb(features {
                                      feature {
                                        key: "id"
                                        value { int64_list { value: 1 } }
                                      }
                                      feature {
                                        key: "image/object/class/label"
                                        value { bytes_list { value: "cat" } }
                                      }
                                    })pb")) ==
        "feature 'image/object/class/label' is bytes_list, expected int64_list");
}

TEST_CASE("RaggedValuesOverMaxFeatureBytesAreRefusedWithTheirBytes") {
  // 100 bytes: 8 ids (64) fit, then a 30-byte caption (34 with its length) goes over.
  const FeatureSchema schema = Schema(R"pb(
    features { key: "ids" type: FEATURE_TYPE_INT64 }
    features { key: "fixed" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_FIXED length: 100 }
    features { key: "caption" type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_SCALAR }
    max_feature_bytes: 100
  )pb");
  CHECK(schema.slot_bytes() == 100 + 400);
  v1::Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  for (int i = 0; i < 8; ++i) f["ids"].mutable_int64_list()->add_value(i);
  for (int i = 0; i < 100; ++i) f["fixed"].mutable_float_list()->add_value(i);
  f["caption"].mutable_bytes_list()->add_value(std::string(28, 'c'));
  FeatureExtractor extract(schema);
  SampleFeatures out;
  // 64 + 28 + 4 = 96: fits; the fixed floats (400 bytes) are not counted.
  REQUIRE(extract.Extract(e.SerializeAsString(), &out).ok());
  CHECK(out.ragged_bytes(schema) == 96);
  f["caption"].mutable_bytes_list()->set_value(0, std::string(40, 'c'));
  CHECK(Refusal(schema, e.SerializeAsString()) ==
        "the record's features take 108 bytes, over max_feature_bytes 100 (lists, bytes values "
        "and boxes count; over from feature 'caption' on)");
  // A long list is counted to its end but stored only up to the bound.
  f["caption"].mutable_bytes_list()->set_value(0, "c");
  for (int i = 0; i < 100000; ++i) f["ids"].mutable_int64_list()->add_value(i);
  Status s = extract.Extract(e.SerializeAsString(), &out);
  CHECK(s.message() ==
        "the record's features take 800069 bytes, over max_feature_bytes 100 (lists, bytes "
        "values and boxes count; over from feature 'ids' on)");
  CHECK(out.arrays[0].data.size() <= 100);

  // Boxes count 16 bytes a box and 8 a label.
  const FeatureSchema boxes = Schema("boxes { enabled: true } max_feature_bytes: 48");
  REQUIRE(FeatureExtractor(boxes)
              .Extract(BoxRecord({{0, 0}, {0, 0}, {1, 1}, {1, 1}}, nullptr), &out)
              .ok());
  CHECK(out.ragged_bytes(boxes) == 48);
  CHECK(Refusal(boxes, BoxRecord({{0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}}, nullptr)) ==
        "the record's features take 72 bytes, over max_feature_bytes 48 (lists, bytes values and "
        "boxes count; over from feature 'image/object/bbox/xmin' on)");
}

TEST_CASE("ExtractResetsTheOutputAndKeepsItsCapacity") {
  const FeatureSchema schema = Schema(R"pb(
    features { key: "ids" type: FEATURE_TYPE_INT64 }
  )pb");
  FeatureExtractor extract(schema);
  SampleFeatures out;
  out.Reset(5);
  out.arrays[0].data = "stale";
  REQUIRE(extract
              .Extract(Record(R"pb(features {
                                     feature {
                                       key: "ids"
                                       value { int64_list { value: 4 } }
                                     }
                                   })pb"),
                       &out)
              .ok());
  REQUIRE(out.arrays.size() == 1);
  CHECK(Int64s(out.arrays[0]) == std::vector<int64_t>{4});
  // A record of 100 ids, then one of 1: the second reuses the first's buffer, and TrimTo leaves
  // it while the slot is within its reserve.
  std::string many = "features { feature { key: 'ids' value { int64_list {";
  for (int i = 0; i < 100; ++i) many += " value: " + std::to_string(i);
  many += " } } } }";
  REQUIRE(extract.Extract(Record(many), &out).ok());
  const int64_t held = out.capacity_bytes();
  CHECK(held >= 100 * 8);
  REQUIRE(extract
              .Extract(Record("features { feature { key: 'ids' value { int64_list { value: 7 } "
                              "} } }"),
                       &out)
              .ok());
  CHECK(Int64s(out.arrays[0]) == std::vector<int64_t>{7});
  CHECK(out.capacity_bytes() == held);
  out.TrimTo(schema.slot_bytes());
  CHECK(out.capacity_bytes() == held);
}

// Three ragged arrays filled in turn, each near max_feature_bytes: without trimming a reused slot
// would keep about three times its reserve; TrimTo after each record keeps it within the reserve
// (plus a short string's inline capacity per array), the record's values intact.
TEST_CASE("ASlotFilledInTurnByDifferentRaggedArraysStaysWithinItsReserve") {
  const FeatureSchema schema = Schema(R"pb(
    features { key: "ids" type: FEATURE_TYPE_INT64 }
    features { key: "names" type: FEATURE_TYPE_BYTES }
    features { key: "scores" type: FEATURE_TYPE_FLOAT }
    features { key: "n" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR }
    max_feature_bytes: 4096
  )pb");
  const int64_t slack = 3 * static_cast<int64_t>(std::string().capacity());
  FeatureExtractor extract(schema);
  SampleFeatures untrimmed, trimmed;
  for (int r = 0; r < 9; ++r) {
    v1::Example e;
    auto& f = *e.mutable_features()->mutable_feature();
    f["n"].mutable_int64_list()->add_value(r);
    switch (r % 3) {
      case 0:
        for (int i = 0; i < 500; ++i) f["ids"].mutable_int64_list()->add_value(i);
        break;
      case 1:
        for (int i = 0; i < 390; ++i) f["names"].mutable_bytes_list()->add_value("abcdef");
        break;
      default:
        for (int i = 0; i < 1000; ++i) f["scores"].mutable_float_list()->add_value(0.5f);
        break;
    }
    const std::string record = e.SerializeAsString();
    REQUIRE(extract.Extract(record, &untrimmed).ok());
    REQUIRE(extract.Extract(record, &trimmed).ok());
    CHECK(trimmed.bytes() <= schema.slot_bytes());
    trimmed.TrimTo(schema.slot_bytes());
    INFO("record " << r);
    CHECK(trimmed.capacity_bytes() <= schema.slot_bytes() + slack);
    CHECK(Int64s(trimmed.arrays[3]) == std::vector<int64_t>{r});
    CHECK(trimmed.bytes() == untrimmed.bytes());
    for (size_t i = 0; i < 3; ++i) CHECK(trimmed.arrays[i].data == untrimmed.arrays[i].data);
  }
  // What the untrimmed slot keeps: every array's largest, near three reserves.
  CHECK(untrimmed.capacity_bytes() > 2 * schema.slot_bytes());
}

TEST_CASE("ManyKeysBeyondTheStackLookupAreAllFound") {
  std::string text;
  v1::Example e;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "k" + std::to_string(i);
    text += "features { key: '" + key + "' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR }";
    (*e.mutable_features()->mutable_feature())[key].mutable_int64_list()->add_value(i);
  }
  const FeatureSchema schema = Schema(text);
  SampleFeatures out;
  REQUIRE(FeatureExtractor(schema).Extract(e.SerializeAsString(), &out).ok());
  for (int i = 0; i < 40; ++i) CHECK(Int64s(out.arrays[i]) == std::vector<int64_t>{i});
}

}  // namespace
}  // namespace sluice

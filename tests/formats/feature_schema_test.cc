#include "formats/feature_schema.h"

#include <google/protobuf/text_format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

namespace sluice {
namespace {

v1::PipelineOptions Options(const std::string& text) {
  v1::PipelineOptions o;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &o));
  return o;
}

// The message of CompileFeatureSchema's refusal of `text`; fails the test when it is accepted.
std::string Refusal(const std::string& text) {
  Result<FeatureSchema> s = CompileFeatureSchema(Options(text));
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == StatusCode::kInvalidArgument);
  return s.status().message();
}

TEST_CASE("NoFeaturesNoBoxesIsAnEmptySchemaWithNoReserve") {
  Result<FeatureSchema> s = CompileFeatureSchema(v1::PipelineOptions());
  REQUIRE(s.ok());
  CHECK(s->empty());
  CHECK(s->array_count() == 0);
  CHECK(s->max_feature_bytes == 0);
  CHECK(s->slot_bytes() == 0);
  CHECK(s->arrays().empty());
  // A bound given without anything to bound is still checked, then unused.
  s = CompileFeatureSchema(Options("max_feature_bytes: 4096"));
  REQUIRE(s.ok());
  CHECK(s->max_feature_bytes == 0);
  CHECK(Refusal("max_feature_bytes: -1") == "max_feature_bytes = -1 is outside [1, 16777216]");
}

TEST_CASE("EveryShapeAndTypeResolvesWithDefaultsAndArraysInOrder") {
  Result<FeatureSchema> s = CompileFeatureSchema(Options(R"pb(
    features {
      key: "image/object/class/label"
      name: "labels"
      type: FEATURE_TYPE_INT64
      shape: FEATURE_SHAPE_MULTI_HOT
      length: 80
      allow_missing: true
    }
    features {
      key: "caption"
      type: FEATURE_TYPE_BYTES
      shape: FEATURE_SHAPE_SCALAR
      default_bytes: "none"
    }
    features {
      key: "weights"
      type: FEATURE_TYPE_FLOAT
      shape: FEATURE_SHAPE_FIXED
      length: 3
      default_value: 0.5
    }
    features { key: "ids" type: FEATURE_TYPE_INT64 }
    features { key: "score" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_SCALAR }
    boxes { enabled: true }
  )pb"));
  REQUIRE(s.ok());
  REQUIRE(s->columns.size() == 5);
  const FeatureColumn& labels = s->columns[0];
  CHECK(labels.key == "image/object/class/label");
  CHECK(labels.name == "labels");
  CHECK(labels.shape == FeatureShape::kMultiHot);
  CHECK(labels.length == 80);
  CHECK(labels.allow_missing);
  CHECK(labels.output_type() == FeatureType::kFloat);
  const FeatureColumn& caption = s->columns[1];
  CHECK(caption.name == "caption");  // name defaults to the key
  CHECK(caption.default_bytes == std::optional<std::string>("none"));
  CHECK_FALSE(caption.default_value);
  CHECK(s->columns[2].default_value == std::optional<double>(0.5));
  CHECK(s->columns[3].shape == FeatureShape::kList);
  CHECK(s->columns[3].length == 0);
  CHECK_FALSE(s->columns[4].default_value);

  const BoxColumns& b = s->boxes;
  CHECK(b.enabled);
  CHECK(b.xmin_key == "image/object/bbox/xmin");
  CHECK(b.ymin_key == "image/object/bbox/ymin");
  CHECK(b.xmax_key == "image/object/bbox/xmax");
  CHECK(b.ymax_key == "image/object/bbox/ymax");
  CHECK(b.label_key == "image/object/class/label");
  CHECK(b.min_overlap == 0);
  CHECK(b.min_size == 1);
  CHECK(b.max_boxes == 1000);
  // 16 KiB and room for max_boxes boxes of 4 floats and an int64 label.
  CHECK(s->max_feature_bytes == 16384 + 1000 * 24);

  using T = FeatureType;
  const std::vector<ArrayInfo> want = {
      {"labels", T::kFloat, false, {80}}, {"caption", T::kBytes, false, {}},
      {"weights", T::kFloat, false, {3}}, {"ids", T::kInt64, true, {}},
      {"score", T::kFloat, false, {}},    {"boxes", T::kFloat, true, {4}},
      {"box_labels", T::kInt64, true, {}}};
  CHECK(s->arrays() == want);
  CHECK(s->array_count() == want.size());
  CHECK(s->boxes_index() == 5);
  // The ragged reserve and the fixed-size numeric values: 80 + 3 + 1 floats.
  CHECK(s->slot_bytes() == 16384 + 1000 * 24 + (80 + 3 + 1) * 4);
}

TEST_CASE("BoxOptionsGivenAreKeptAndMinSizeNegativeIsZero") {
  Result<FeatureSchema> s = CompileFeatureSchema(Options(R"pb(
    boxes {
      enabled: true
      xmin_key: "x0"
      ymin_key: "y0"
      xmax_key: "x1"
      ymax_key: "y1"
      label_key: "cls"
      min_overlap: 0.25
      min_size: -3
      max_boxes: 7
    }
    max_feature_bytes: 100
  )pb"));
  REQUIRE(s.ok());
  CHECK(s->columns.empty());
  CHECK(s->boxes.xmin_key == "x0");
  CHECK(s->boxes.ymax_key == "y1");
  CHECK(s->boxes.label_key == "cls");
  CHECK(s->boxes.min_overlap == 0.25);
  CHECK(s->boxes.min_size == 0);
  CHECK(s->boxes.max_boxes == 7);
  CHECK(s->max_feature_bytes == 100);
  CHECK(s->slot_bytes() == 100);
  CHECK(s->boxes_index() == 0);
  s = CompileFeatureSchema(Options("boxes { enabled: true min_size: 2.5 }"));
  REQUIRE(s.ok());
  CHECK(s->boxes.min_size == 2.5);
  // Keys set on disabled boxes (a dataset's default a request turned off) read nothing.
  s = CompileFeatureSchema(Options("boxes { xmin_key: \"x\" max_boxes: -4 }"));
  REQUIRE(s.ok());
  CHECK(s->empty());
}

TEST_CASE("EachRefusalNamesTheFieldAndItsValue") {
  struct Case {
    const char* options;
    const char* message;
  };
  const Case cases[] = {
      {"features { type: FEATURE_TYPE_INT64 }",
       "features[0].key: empty; name the Example feature to read"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 } features { key: \"b\" }",
       "features[1].type = 0: a feature needs its type, FEATURE_TYPE_INT64, FEATURE_TYPE_FLOAT "
       "or FEATURE_TYPE_BYTES (the Example list it is read from)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: 9 }",
       "features[0].shape = 9 is not a sluice.v1.FeatureShape"},
      {"features { key: \"a\" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_MULTI_HOT length: 3 }",
       "features[0].type = FEATURE_TYPE_FLOAT: FEATURE_SHAPE_MULTI_HOT reads int64 class "
       "indices; it needs FEATURE_TYPE_INT64"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 }"
       "features { key: \"b\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_FIXED }",
       "features[1].length = 0: FEATURE_SHAPE_FIXED needs a length in [1, 65536] (values per "
       "record)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_MULTI_HOT "
       "length: 65537 }",
       "features[0].length = 65537: FEATURE_SHAPE_MULTI_HOT needs a length in [1, 65536] (its "
       "number of classes)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_FIXED length: -2 }",
       "features[0].length = -2: FEATURE_SHAPE_FIXED needs a length in [1, 65536] (values per "
       "record)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 length: 4 }",
       "features[0].length = 4: FEATURE_SHAPE_LIST takes no length (only FEATURE_SHAPE_FIXED "
       "and FEATURE_SHAPE_MULTI_HOT do)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR length: 1 }",
       "features[0].length = 1: FEATURE_SHAPE_SCALAR takes no length (only FEATURE_SHAPE_FIXED "
       "and FEATURE_SHAPE_MULTI_HOT do)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 default_value: 1 }",
       "features[0].default_value = 1: FEATURE_SHAPE_LIST takes no default (a missing LIST "
       "feature is an empty row)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_MULTI_HOT length: 2 "
       "default_value: 0 }",
       "features[0].default_value = 0: FEATURE_SHAPE_MULTI_HOT takes no default (set "
       "allow_missing for all 0 when the feature is missing)"},
      {"features { key: \"a\" type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_SCALAR "
       "default_value: 0 }",
       "features[0].default_value = 0: a FEATURE_TYPE_BYTES feature's default is default_bytes"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR "
       "default_value: 1.5 }",
       "features[0].default_value = 1.5: not a value of FEATURE_TYPE_INT64 (an integer in "
       "[-2^63, 2^63))"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR "
       "default_value: 1e19 }",
       "features[0].default_value = 1e+19: not a value of FEATURE_TYPE_INT64 (an integer in "
       "[-2^63, 2^63))"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR "
       "default_value: nan }",
       "features[0].default_value = nan: not a value of FEATURE_TYPE_INT64 (an integer in "
       "[-2^63, 2^63))"},
      {"features { key: \"a\" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_FIXED length: 2 "
       "default_value: 1e39 }",
       "features[0].default_value = 1e+39: not a value of FEATURE_TYPE_FLOAT (float32's range)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR "
       "default_bytes: \"x\" }",
       "features[0].default_bytes (1 bytes): only a FEATURE_TYPE_BYTES feature takes "
       "default_bytes (a numeric one's default is default_value)"},
      {"features { key: \"a\" type: FEATURE_TYPE_BYTES default_bytes: \"\" }",
       "features[0].default_bytes (0 bytes): FEATURE_SHAPE_LIST takes no default (a missing "
       "LIST feature is an empty row)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR "
       "allow_missing: true }",
       "features[0].allow_missing: only FEATURE_SHAPE_MULTI_HOT takes it (FEATURE_SHAPE_SCALAR: "
       "give a default instead)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 allow_missing: true }",
       "features[0].allow_missing: only FEATURE_SHAPE_MULTI_HOT takes it (FEATURE_SHAPE_LIST: a "
       "missing feature is an empty row)"},
      {"features { key: \"a\" type: FEATURE_TYPE_INT64 }"
       "features { key: \"b\" name: \"a\" type: FEATURE_TYPE_INT64 }",
       "features[1].name = 'a' is also features[0]'s name; each array of a batch needs its own "
       "name"},
      {"features { key: \"a\" name: \"x\" type: FEATURE_TYPE_INT64 }"
       "features { key: \"x\" type: FEATURE_TYPE_FLOAT }",
       "features[1].name = 'x' is also features[0]'s name (a name defaults to the key); each "
       "array of a batch needs its own name"},
      {"features { key: \"b\" name: \"boxes\" type: FEATURE_TYPE_FLOAT } boxes { enabled: true }",
       "features[0].name = 'boxes' is the name of the boxes' own array (boxes.enabled); give the "
       "feature another name"},
      {"features { key: \"box_labels\" type: FEATURE_TYPE_INT64 } boxes { enabled: true }",
       "features[0].name = 'box_labels' is the name of the boxes' own array (boxes.enabled); "
       "give the feature another name"},
      {"features { key: \"a\" type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_FIXED length: 4 "
       "default_bytes: \"0123456789\" } max_feature_bytes: 50",
       "features[0].default_bytes: 4 values of 10 bytes take 56 bytes, over max_feature_bytes "
       "50: every record that lacks 'a' would be refused"},
      {"boxes { enabled: true min_overlap: 1.5 }",
       "boxes.min_overlap = 1.5 is outside [0, 1] (the share of a box's area a crop must keep)"},
      {"boxes { enabled: true min_overlap: -0.25 }",
       "boxes.min_overlap = -0.25 is outside [0, 1] (the share of a box's area a crop must "
       "keep)"},
      {"boxes { enabled: true min_overlap: nan }",
       "boxes.min_overlap = nan is outside [0, 1] (the share of a box's area a crop must keep)"},
      {"boxes { enabled: true min_size: inf }", "boxes.min_size = inf is not a number of pixels"},
      {"boxes { enabled: true max_boxes: -1 }", "boxes.max_boxes = -1 is outside [1, 100000]"},
      {"boxes { enabled: true max_boxes: 100001 }",
       "boxes.max_boxes = 100001 is outside [1, 100000]"},
      {"boxes { enabled: true ymax_key: \"image/object/bbox/xmin\" }",
       "boxes.ymax_key = 'image/object/bbox/xmin' is also boxes.xmin_key; each box list has its "
       "own key"},
      {"boxes { enabled: true label_key: \"y\" ymin_key: \"y\" }",
       "boxes.label_key = 'y' is also boxes.ymin_key; each box list has its own key"},
      {"boxes { enabled: true } max_feature_bytes: 16777217",
       "max_feature_bytes = 16777217 is outside [1, 16777216]"},
      {"features { key: \"a\" type: FEATURE_TYPE_BYTES } max_feature_bytes: -5",
       "max_feature_bytes = -5 is outside [1, 16777216]"},
  };
  for (const Case& c : cases) {
    INFO(c.options);
    CHECK(Refusal(c.options) == c.message);
  }
}

TEST_CASE("DefaultsAtTheEdgesOfTheirTypeAreTaken") {
  Result<FeatureSchema> s = CompileFeatureSchema(Options(R"pb(
    features {
      key: "a"
      type: FEATURE_TYPE_INT64
      shape: FEATURE_SHAPE_SCALAR
      default_value: -9223372036854775808
    }
    features { key: "b" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_SCALAR default_value: nan }
    features {
      key: "c"
      type: FEATURE_TYPE_FLOAT
      shape: FEATURE_SHAPE_FIXED
      length: 2
      default_value: -inf
    }
    features {
      key: "d"
      type: FEATURE_TYPE_BYTES
      shape: FEATURE_SHAPE_FIXED
      length: 2
      default_bytes: ""
    }
    features { key: "a" name: "a_again" type: FEATURE_TYPE_FLOAT }
  )pb"));
  REQUIRE(s.ok());
  CHECK(*s->columns[0].default_value == -9223372036854775808.0);
  CHECK(std::isnan(*s->columns[1].default_value));
  CHECK(*s->columns[3].default_bytes == "");
  // One key read twice, as two arrays.
  CHECK(s->columns[4].key == "a");
}

// numpy prints float32's max as 3.4028235e38, a double a little over FLT_MAX that rounds to it;
// every double short of halfway to 2^128 does, and from halfway on it rounds to infinity.
TEST_CASE("FloatDefaultsRoundingToAFiniteFloatAreTakenAndBeyondRefused") {
  const double flt_max = std::numeric_limits<float>::max();
  const double halfway = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);
  auto compile = [](double v) {
    v1::PipelineOptions o;
    v1::FeatureSpec* f = o.add_features();
    f->set_key("x");
    f->set_type(v1::FEATURE_TYPE_FLOAT);
    f->set_shape(v1::FEATURE_SHAPE_SCALAR);
    f->set_default_value(v);
    return CompileFeatureSchema(o);
  };
  for (double v : {3.4028235e38, -3.4028235e38, flt_max, std::nextafter(halfway, 0.0),
                   -std::nextafter(halfway, 0.0)}) {
    INFO(v);
    Result<FeatureSchema> s = compile(v);
    REQUIRE(s.ok());
    CHECK(std::fabs(static_cast<float>(*s->columns[0].default_value)) ==
          std::numeric_limits<float>::max());
  }
  for (double v : {halfway, -halfway, std::nextafter(halfway, 1e300), 3.4028236e38}) {
    INFO(v);
    Result<FeatureSchema> s = compile(v);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.status().message(),
               Catch::Contains("not a value of FEATURE_TYPE_FLOAT (float32's range)"));
  }
}

// A batch carries at most kMaxFeatureArrays arrays (clients refuse more): boxes' two count.
std::string Specs(int count, bool boxes) {
  std::string text = boxes ? "boxes { enabled: true } " : "";
  for (int i = 0; i < count; ++i) {
    text += "features { key: \"k" + std::to_string(i) + "\" type: FEATURE_TYPE_INT64 } ";
  }
  return text;
}

TEST_CASE("MoreArraysThanABatchCarriesAreRefused") {
  CHECK(CompileFeatureSchema(Options(Specs(kMaxFeatureArrays, false))).ok());
  CHECK(CompileFeatureSchema(Options(Specs(kMaxFeatureArrays - 2, true))).ok());
  CHECK(Refusal(Specs(kMaxFeatureArrays + 1, false)) ==
        "features holds 4097 specs, over the 4096 arrays a batch may carry");
  CHECK(
      Refusal(Specs(kMaxFeatureArrays - 1, true)) ==
      "features holds 4095 specs besides boxes' 2 arrays, over the 4096 arrays a batch may carry");
}

}  // namespace
}  // namespace sluice

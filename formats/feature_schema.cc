#include "formats/feature_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <system_error>

namespace sluice {
namespace {

// The most values a FIXED feature or classes a MULTI_HOT one may have: a row of a batch.
constexpr int64_t kMaxLength = kMaxRowDimension;
constexpr int64_t kDefaultMaxFeatureBytes = int64_t{16} << 10;
constexpr int64_t kMaxMaxFeatureBytes = int64_t{16} << 20;
constexpr int32_t kDefaultMaxBoxes = 1000;
constexpr int64_t kMaxMaxBoxes = 100000;

// A double as it was most likely written: the shortest form that reads back the same.
std::string Number(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// "FIELD = VALUE is outside [MIN, MAX]", as pipeline/tunables.h's CheckRange words it.
Status CheckRange(const std::string& field, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return Status::OK();
  return InvalidArgument(field + " = " + std::to_string(value) + " is outside [" +
                         std::to_string(min) + ", " + std::to_string(max) + "]");
}

const char* TypeEnumName(FeatureType type) {
  switch (type) {
    case FeatureType::kInt64:
      return "FEATURE_TYPE_INT64";
    case FeatureType::kFloat:
      return "FEATURE_TYPE_FLOAT";
    case FeatureType::kBytes:
      return "FEATURE_TYPE_BYTES";
  }
  return "FEATURE_TYPE_UNSPECIFIED";
}

const char* ShapeName(v1::FeatureShape shape) {
  switch (shape) {
    case v1::FEATURE_SHAPE_LIST:
      return "FEATURE_SHAPE_LIST";
    case v1::FEATURE_SHAPE_SCALAR:
      return "FEATURE_SHAPE_SCALAR";
    case v1::FEATURE_SHAPE_FIXED:
      return "FEATURE_SHAPE_FIXED";
    case v1::FEATURE_SHAPE_MULTI_HOT:
      return "FEATURE_SHAPE_MULTI_HOT";
    default:
      return "FEATURE_SHAPE_UNKNOWN";
  }
}

// Whether a numeric default is a value of the column's type: an integer an int64 holds, or a
// double that rounds to a float32 (infinities and NaN included, as tf.io.FixedLenFeature takes
// them). A finite double rounds to a finite float below halfway from FLT_MAX to 2^128 (halfway
// itself rounds to even: 2^128, infinity), so numpy's printed float32 max 3.4028235e38, a little
// over FLT_MAX, is FLT_MAX.
bool DefaultFits(FeatureType type, double v) {
  if (type == FeatureType::kFloat) {
    // (2 - 2^-24) * 2^127: FLT_MAX plus half its last place; exact in a double.
    const double kRoundsToInfinity = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);
    return !std::isfinite(v) || std::fabs(v) < kRoundsToInfinity;
  }
  // [-2^63, 2^63): both bounds are exact doubles.
  return std::isfinite(v) && v == std::trunc(v) && v >= -9223372036854775808.0 &&
         v < 9223372036854775808.0;
}

Result<FeatureColumn> CompileColumn(const v1::FeatureSpec& spec, const std::string& field) {
  FeatureColumn c;
  if (spec.key().empty()) {
    return InvalidArgument(field + ".key: empty; name the Example feature to read");
  }
  c.key = spec.key();
  c.name = spec.name().empty() ? spec.key() : spec.name();
  switch (spec.type()) {
    case v1::FEATURE_TYPE_INT64:
      c.type = FeatureType::kInt64;
      break;
    case v1::FEATURE_TYPE_FLOAT:
      c.type = FeatureType::kFloat;
      break;
    case v1::FEATURE_TYPE_BYTES:
      c.type = FeatureType::kBytes;
      break;
    default:
      return InvalidArgument(field + ".type = " + std::to_string(spec.type()) +
                             ": a feature needs its type, FEATURE_TYPE_INT64, FEATURE_TYPE_FLOAT "
                             "or FEATURE_TYPE_BYTES (the Example list it is read from)");
  }
  const std::string shape = ShapeName(spec.shape());
  switch (spec.shape()) {
    case v1::FEATURE_SHAPE_LIST:
      c.shape = FeatureShape::kList;
      break;
    case v1::FEATURE_SHAPE_SCALAR:
      c.shape = FeatureShape::kScalar;
      break;
    case v1::FEATURE_SHAPE_FIXED:
      c.shape = FeatureShape::kFixed;
      break;
    case v1::FEATURE_SHAPE_MULTI_HOT:
      c.shape = FeatureShape::kMultiHot;
      break;
    default:
      return InvalidArgument(field + ".shape = " + std::to_string(spec.shape()) +
                             " is not a sluice.v1.FeatureShape");
  }
  if (c.shape == FeatureShape::kMultiHot && c.type != FeatureType::kInt64) {
    return InvalidArgument(field + ".type = " + TypeEnumName(c.type) +
                           ": FEATURE_SHAPE_MULTI_HOT reads int64 class indices; it needs "
                           "FEATURE_TYPE_INT64");
  }
  if (c.shape == FeatureShape::kFixed || c.shape == FeatureShape::kMultiHot) {
    if (spec.length() < 1 || spec.length() > kMaxLength) {
      return InvalidArgument(field + ".length = " + std::to_string(spec.length()) + ": " + shape +
                             " needs a length in [1, " + std::to_string(kMaxLength) + "]" +
                             (c.shape == FeatureShape::kMultiHot ? " (its number of classes)"
                                                                 : " (values per record)"));
    }
    c.length = spec.length();
  } else if (spec.length() != 0) {
    return InvalidArgument(field + ".length = " + std::to_string(spec.length()) + ": " + shape +
                           " takes no length (only FEATURE_SHAPE_FIXED and "
                           "FEATURE_SHAPE_MULTI_HOT do)");
  }
  const bool fixed_size = c.shape == FeatureShape::kScalar || c.shape == FeatureShape::kFixed;
  if (spec.has_default_value()) {
    const std::string value = field + ".default_value = " + Number(spec.default_value());
    if (!fixed_size) {
      return InvalidArgument(value + ": " + shape + " takes no default (" +
                             (c.shape == FeatureShape::kList
                                  ? "a missing LIST feature is an empty row"
                                  : "set allow_missing for all 0 when the feature is missing") +
                             ")");
    }
    if (c.type == FeatureType::kBytes) {
      return InvalidArgument(value + ": a FEATURE_TYPE_BYTES feature's default is default_bytes");
    }
    if (!DefaultFits(c.type, spec.default_value())) {
      return InvalidArgument(value + ": not a value of " + TypeEnumName(c.type) +
                             (c.type == FeatureType::kInt64 ? " (an integer in [-2^63, 2^63))"
                                                            : " (float32's range)"));
    }
    c.default_value = spec.default_value();
  }
  if (spec.has_default_bytes()) {
    const std::string value =
        field + ".default_bytes (" + std::to_string(spec.default_bytes().size()) + " bytes)";
    if (c.type != FeatureType::kBytes) {
      return InvalidArgument(value + ": only a FEATURE_TYPE_BYTES feature takes default_bytes (" +
                             "a numeric one's default is default_value)");
    }
    if (!fixed_size) {
      return InvalidArgument(value + ": " + shape + " takes no default (a missing LIST " +
                             "feature is an empty row)");
    }
    c.default_bytes = spec.default_bytes();
  }
  if (spec.allow_missing()) {
    if (c.shape != FeatureShape::kMultiHot) {
      return InvalidArgument(
          field + ".allow_missing: only FEATURE_SHAPE_MULTI_HOT takes it (" + shape +
          (fixed_size ? ": give a default instead)" : ": a missing feature is an empty row)"));
    }
    c.allow_missing = true;
  }
  return c;
}

Result<BoxColumns> CompileBoxes(const v1::BoxOptions& o) {
  BoxColumns b;
  b.enabled = true;
  struct Key {
    const char* field;
    const std::string& given;
    std::string* out;
  };
  const Key keys[] = {{"boxes.xmin_key", o.xmin_key(), &b.xmin_key},
                      {"boxes.ymin_key", o.ymin_key(), &b.ymin_key},
                      {"boxes.xmax_key", o.xmax_key(), &b.xmax_key},
                      {"boxes.ymax_key", o.ymax_key(), &b.ymax_key},
                      {"boxes.label_key", o.label_key(), &b.label_key}};
  for (size_t i = 0; i < std::size(keys); ++i) {
    if (!keys[i].given.empty()) *keys[i].out = keys[i].given;
    for (size_t j = 0; j < i; ++j) {
      if (*keys[j].out == *keys[i].out) {
        return InvalidArgument(std::string(keys[i].field) + " = '" + *keys[i].out + "' is also " +
                               keys[j].field + "; each box list has its own key");
      }
    }
  }
  if (!(o.min_overlap() >= 0 && o.min_overlap() <= 1)) {
    return InvalidArgument("boxes.min_overlap = " + Number(o.min_overlap()) +
                           " is outside [0, 1] (the share of a box's area a crop must keep)");
  }
  b.min_overlap = o.min_overlap();
  if (!std::isfinite(o.min_size())) {
    return InvalidArgument("boxes.min_size = " + Number(o.min_size()) +
                           " is not a number of pixels");
  }
  // Unset (0) is torchvision's default of 1; a negative size keeps every box but empty ones.
  b.min_size = o.min_size() == 0 ? 1.0 : std::max(0.0, static_cast<double>(o.min_size()));
  const int64_t max_boxes = o.max_boxes() == 0 ? kDefaultMaxBoxes : o.max_boxes();
  RETURN_IF_ERROR(CheckRange("boxes.max_boxes", max_boxes, 1, kMaxMaxBoxes));
  b.max_boxes = static_cast<int32_t>(max_boxes);
  return b;
}

}  // namespace

Result<FeatureSchema> CompileFeatureSchema(const v1::PipelineOptions& options) {
  FeatureSchema schema;
  if (options.boxes().enabled()) {
    ASSIGN_OR_RETURN(schema.boxes, CompileBoxes(options.boxes()));
  }
  const int box_arrays = schema.boxes.enabled ? 2 : 0;
  if (options.features_size() + box_arrays > kMaxFeatureArrays) {
    return InvalidArgument("features holds " + std::to_string(options.features_size()) +
                           " specs" + (box_arrays ? " besides boxes' 2 arrays" : "") +
                           ", over the " + std::to_string(kMaxFeatureArrays) +
                           " arrays a batch may carry");
  }
  schema.columns.reserve(options.features_size());
  for (int i = 0; i < options.features_size(); ++i) {
    const std::string field = "features[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(FeatureColumn c, CompileColumn(options.features(i), field));
    for (size_t j = 0; j < schema.columns.size(); ++j) {
      if (schema.columns[j].name == c.name) {
        return InvalidArgument(
            field + ".name = '" + c.name + "' is also features[" + std::to_string(j) + "]'s name" +
            (options.features(i).name().empty() ? " (a name defaults to the key)" : "") +
            "; each array of a batch needs its own name");
      }
    }
    if (schema.boxes.enabled && (c.name == "boxes" || c.name == "box_labels")) {
      return InvalidArgument(field + ".name = '" + c.name + "' is the name of the boxes' own " +
                             "array (boxes.enabled); give the feature another name");
    }
    schema.columns.push_back(std::move(c));
  }
  if (options.max_feature_bytes() != 0 || !schema.empty()) {
    // The default holds max_boxes boxes (4 floats and a label each) besides 16 KiB of the rest.
    const int64_t box_bytes =
        schema.boxes.enabled ? int64_t{schema.boxes.max_boxes} * (4 * sizeof(float) + 8) : 0;
    const int64_t max = options.max_feature_bytes() == 0 ? kDefaultMaxFeatureBytes + box_bytes
                                                         : options.max_feature_bytes();
    RETURN_IF_ERROR(CheckRange("max_feature_bytes", max, 1, kMaxMaxFeatureBytes));
    schema.max_feature_bytes = schema.empty() ? 0 : max;
  }
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const FeatureColumn& c = schema.columns[i];
    if (!c.default_bytes) continue;
    // As ragged_bytes counts a record's value: its bytes and its length.
    const int64_t bytes =
        int64_t{c.row_values()} * static_cast<int64_t>(c.default_bytes->size() + sizeof(uint32_t));
    if (bytes > schema.max_feature_bytes) {
      return InvalidArgument("features[" + std::to_string(i) +
                             "].default_bytes: " + std::to_string(c.row_values()) + " values of " +
                             std::to_string(c.default_bytes->size()) + " bytes take " +
                             std::to_string(bytes) + " bytes, over max_feature_bytes " +
                             std::to_string(schema.max_feature_bytes) +
                             ": every record that lacks '" + c.key + "' would be refused");
    }
  }
  return schema;
}

std::vector<ArrayInfo> FeatureSchema::arrays() const {
  std::vector<ArrayInfo> out;
  out.reserve(array_count());
  for (const FeatureColumn& c : columns) {
    ArrayInfo a{c.name, c.output_type(), c.ragged(), {}};
    if (c.shape == FeatureShape::kFixed || c.shape == FeatureShape::kMultiHot) {
      a.row_shape.push_back(c.length);
    }
    out.push_back(std::move(a));
  }
  if (boxes.enabled) {
    out.push_back(ArrayInfo{"boxes", FeatureType::kFloat, true, {4}});
    out.push_back(ArrayInfo{"box_labels", FeatureType::kInt64, true, {}});
  }
  return out;
}

int64_t FeatureSchema::slot_bytes() const {
  if (empty()) return 0;
  int64_t bytes = max_feature_bytes;
  for (const FeatureColumn& c : columns) {
    if (c.ragged() || c.type == FeatureType::kBytes) continue;
    bytes += static_cast<int64_t>(c.row_values()) * (c.output_type() == FeatureType::kInt64 ? 8 : 4);
  }
  return bytes;
}

}  // namespace sluice

// What a pipeline's records deliver beyond the image and its label (PipelineOptions.features and
// boxes, config.proto) with defaults applied and every field checked: the columns read from each
// record, the box keys and filters, and the arrays each batch then carries (Batch.features,
// DatasetInfo.features), in one order that SampleFeatures, the batch buffers, the wire and the
// clients share. Immutable once made.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "sluice/v1/config.pb.h"

namespace sluice {

// The values are the proto's FeatureType.
enum class FeatureType : int32_t { kInt64 = 1, kFloat = 2, kBytes = 3 };
// "int64", "float", "bytes". Inline: the client and the wire, which link no formats library,
// name types too.
inline const char* FeatureTypeName(FeatureType type) {
  switch (type) {
    case FeatureType::kInt64: return "int64";
    case FeatureType::kFloat: return "float";
    case FeatureType::kBytes: return "bytes";
  }
  return "unknown";
}

enum class FeatureShape { kList, kScalar, kFixed, kMultiHot };

// One FeatureSpec, resolved.
struct FeatureColumn {
  std::string key;   // the Example feature
  std::string name;  // the array's name in a batch
  FeatureType type = FeatureType::kInt64;  // the list the record must hold
  FeatureShape shape = FeatureShape::kList;
  int32_t length = 0;  // values per record (FIXED), classes (MULTI_HOT); 0 otherwise
  std::optional<double> default_value;      // SCALAR / FIXED numeric: a missing feature's values
  std::optional<std::string> default_bytes; // SCALAR / FIXED bytes: a missing feature's values
  bool allow_missing = false;               // MULTI_HOT: missing is all 0

  // What a batch carries: float32 0/1 for MULTI_HOT, else `type`.
  FeatureType output_type() const {
    return shape == FeatureShape::kMultiHot ? FeatureType::kFloat : type;
  }
  bool ragged() const { return shape == FeatureShape::kList; }
  // Values one row holds: 1 (LIST, SCALAR), length (FIXED, MULTI_HOT).
  int32_t row_values() const {
    return shape == FeatureShape::kFixed || shape == FeatureShape::kMultiHot ? length : 1;
  }
};

// BoxOptions, resolved.
struct BoxColumns {
  bool enabled = false;
  std::string xmin_key = "image/object/bbox/xmin";
  std::string ymin_key = "image/object/bbox/ymin";
  std::string xmax_key = "image/object/bbox/xmax";
  std::string ymax_key = "image/object/bbox/ymax";
  std::string label_key = "image/object/class/label";
  double min_overlap = 0;  // of a box's source area, inside every crop
  double min_size = 1;     // output pixels, each side
  int32_t max_boxes = 1000;
};

// One array of every batch (service.proto FeatureInfo).
struct ArrayInfo {
  std::string name;
  FeatureType type = FeatureType::kInt64;
  bool ragged = false;
  std::vector<int32_t> row_shape;  // [] scalar, [4] box, [length]
  bool operator==(const ArrayInfo&) const = default;
};

struct FeatureSchema {
  std::vector<FeatureColumn> columns;
  BoxColumns boxes;
  // PipelineOptions.max_feature_bytes resolved: 0 when empty(), else by default 16 KiB and 24 bytes
  // a box of boxes.max_boxes.
  int64_t max_feature_bytes = 0;

  bool empty() const { return columns.empty() && !boxes.enabled; }
  // The arrays a batch carries, in order: each column's, then "boxes" (float, ragged, [4]) and
  // "box_labels" (int64, ragged, []) when boxes are enabled. SampleFeatures::arrays and
  // Batch.features follow this order.
  std::vector<ArrayInfo> arrays() const;
  size_t array_count() const { return columns.size() + (boxes.enabled ? 2 : 0); }
  // Index of "boxes" in arrays() ("box_labels" follows). REQUIRES: boxes.enabled.
  size_t boxes_index() const { return columns.size(); }
  // Bytes one batch slot reserves for a record's features: max_feature_bytes for the ragged ones
  // plus every fixed-size column's (SCALAR, FIXED and MULTI_HOT values; bytes columns count in
  // max_feature_bytes). 0 when empty().
  int64_t slot_bytes() const;
};

// The most arrays (features, plus "boxes" and "box_labels") a schema has, and so a Batch carries
// (service.proto Batch.features): a decoder refuses more before reading them.
inline constexpr int kMaxFeatureArrays = 4096;
// The bounds of a row_shape dimension (a FIXED length, MULTI_HOT classes, a box's 4 corners).
inline constexpr int32_t kMaxRowDimension = 65536;

// Resolves options.features, options.boxes and options.max_feature_bytes. InvalidArgument naming
// the field and its value ("features[1].length = 0: FEATURE_SHAPE_FIXED needs a length in
// [1, 65536]"): a spec without key or type, a name used twice (or "boxes" / "box_labels" with
// boxes), MULTI_HOT of other than INT64, a length outside [1, 65536] where the shape needs one
// (or set where it does not), a default that does not fit the type or shape, BoxOptions out of
// range (min_overlap outside [0, 1], max_boxes outside [1, 100000]), max_feature_bytes outside
// [1, 16 MiB], more than kMaxFeatureArrays arrays.
Result<FeatureSchema> CompileFeatureSchema(const v1::PipelineOptions& options);

}  // namespace sluice

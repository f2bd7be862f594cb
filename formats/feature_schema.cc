#include "formats/feature_schema.h"

namespace sluice {

const char* FeatureTypeName(FeatureType type) {
  switch (type) {
    case FeatureType::kInt64: return "int64";
    case FeatureType::kFloat: return "float";
    case FeatureType::kBytes: return "bytes";
  }
  return "unknown";
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

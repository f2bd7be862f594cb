#include "formats/sample_features.h"

namespace sluice {

void SampleFeatures::Reset(size_t count) {
  arrays.resize(count);
  for (FeatureValues& a : arrays) a.Clear();
}

void SampleFeatures::SetEmpty(const FeatureSchema& schema) {
  Reset(schema.array_count());
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const FeatureColumn& c = schema.columns[i];
    if (c.ragged()) continue;
    FeatureValues& a = arrays[i];
    a.rows = 1;
    const size_t values = static_cast<size_t>(c.row_values());
    if (c.type == FeatureType::kBytes) {
      a.sizes.assign(values, 0);
    } else {
      a.data.assign(values * (c.output_type() == FeatureType::kInt64 ? 8 : 4), '\0');
    }
  }
}

int64_t SampleFeatures::bytes() const {
  int64_t total = 0;
  for (const FeatureValues& a : arrays) total += a.bytes();
  return total;
}

int64_t SampleFeatures::ragged_bytes(const FeatureSchema& schema) const {
  int64_t total = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const bool fixed = i < schema.columns.size() && !schema.columns[i].ragged() &&
                       schema.columns[i].type != FeatureType::kBytes;
    if (!fixed) total += arrays[i].bytes();
  }
  return total;
}

}  // namespace sluice

// Batch.features (service.proto FeatureArray) on the wire: the server encodes its batch slots'
// SampleFeatures into the message prefix (before the images), the client reads them back into
// arrays of its own. Any protobuf parser reads the same bytes as plain FeatureArray messages.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/feature_schema.h"
#include "formats/sample_features.h"
#include "formats/status.h"

namespace sluice {

// Appends one Batch.features entry (field 12) per array of `arrays` to *out, each holding the
// values of samples[0..N) in order: row_lengths for a ragged array, value_lengths for bytes.
// REQUIRES: every sample has arrays.size() arrays, as FeatureExtractor fills them.
void EncodeFeatureArrays(const std::vector<ArrayInfo>& arrays,
                         std::span<const SampleFeatures> samples, std::string* out);

// One feature of a received batch (service.proto FeatureArray), checked against the batch's N.
struct ReceivedFeature {
  std::string name;
  FeatureType type = FeatureType::kInt64;
  std::vector<int32_t> row_shape;
  std::vector<int32_t> row_lengths;  // ragged: N values; empty: one row per sample
  // int64 / float32 values (native order), or bytes concatenated (value_lengths each).
  std::string values;
  std::vector<int32_t> value_lengths;

  bool ragged() const { return !row_lengths.empty(); }
};

// Parses one serialized FeatureArray of a batch of n samples into *out. DataLoss naming the
// feature and what is wrong: an unknown type, a negative row_shape or row_lengths value,
// row_lengths of other than 0 or n values, values of other than rows × prod(row_shape) elements
// of the type, value_lengths that do not add up to the values' bytes (or present on a numeric
// array).
Status DecodeFeatureArray(std::string_view message, int32_t n, ReceivedFeature* out);

}  // namespace sluice

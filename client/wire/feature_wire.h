// Batch.features (service.proto FeatureArray) on the wire: the server encodes its batch slots'
// SampleFeatures into the message prefix (before the images), the client reads them back into
// arrays of its own. Any protobuf parser reads the same bytes as plain FeatureArray messages.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

// A received row_shape: at most this many dimensions, each in [1, kMaxRowDimension], and at most
// kMaxRowValues values a row (so row_values() and rows × row_values() cannot overflow).
inline constexpr size_t kMaxRowDimensions = 4;
inline constexpr int64_t kMaxRowValues = INT32_MAX;

// One feature of a received batch (service.proto FeatureArray), checked against the batch's N.
struct ReceivedFeature {
  std::string name;
  FeatureType type = FeatureType::kInt64;
  std::vector<int32_t> row_shape;
  std::vector<int32_t> row_lengths;  // ragged: N values; empty: one row per sample
  // int64 / float32 values (native order), or bytes concatenated (value_lengths each).
  std::string values;
  std::vector<int32_t> value_lengths;
  // Set by DecodeFeatureArray. Ragged: N + 1 values, sample i's rows are
  // [row_splits[i], row_splits[i + 1]); else {0}. BYTES: elements + 1 byte offsets into values.
  std::vector<int64_t> row_splits;
  std::vector<uint64_t> value_offsets;

  bool ragged() const { return !row_lengths.empty(); }
  // Values one row holds: prod(row_shape), at most kMaxRowValues once DecodeFeatureArray accepted
  // the array.
  int64_t row_values() const {
    int64_t v = 1;
    for (int32_t d : row_shape) v *= d;
    return v;
  }
  // Sample i's rows: [first, end) of the array's rows. REQUIRES: i < N.
  std::pair<int64_t, int64_t> rows_of(size_t i) const {
    if (ragged()) return {row_splits[i], row_splits[i + 1]};
    return {static_cast<int64_t>(i), static_cast<int64_t>(i) + 1};
  }
  // Every value, in row order. REQUIRES: type kInt64 (int64s) / kFloat (floats).
  std::span<const int64_t> int64s() const { return Typed<int64_t>(); }
  std::span<const float> floats() const { return Typed<float>(); }
  // Sample i's values. REQUIRES: as above, i < N.
  std::span<const int64_t> int64s(size_t i) const { return int64s().subspan(First(i), Count(i)); }
  std::span<const float> floats(size_t i) const { return floats().subspan(First(i), Count(i)); }
  // BYTES: value k of the array (row r's values are r·row_values() ...). REQUIRES: kBytes.
  std::string_view bytes(size_t k) const {
    return std::string_view(values).substr(value_offsets[k],
                                           value_offsets[k + 1] - value_offsets[k]);
  }
  // BYTES: how many values the array holds.
  size_t bytes_count() const { return value_lengths.size(); }

 private:
  template <typename T>
  std::span<const T> Typed() const {
    // DecodeFeatureArray keeps `values` on the heap (capacity past any short-string buffer):
    // operator new's alignment suits any fundamental type.
    return {reinterpret_cast<const T*>(values.data()), values.size() / sizeof(T)};
  }
  size_t First(size_t i) const { return static_cast<size_t>(rows_of(i).first * row_values()); }
  size_t Count(size_t i) const {
    auto [first, end] = rows_of(i);
    return static_cast<size_t>((end - first) * row_values());
  }
};

// Parses one serialized FeatureArray of a batch of n samples into *out. DataLoss naming the
// feature and what is wrong: an unknown type, a row_shape of over kMaxRowDimensions dimensions,
// a dimension outside [1, kMaxRowDimension] or over kMaxRowValues values a row, a negative
// row_lengths value, row_lengths of other than 0 or n values, values of other than
// rows × prod(row_shape) elements of the type, value_lengths that do not add up to the values'
// bytes (or present on a numeric array).
Status DecodeFeatureArray(std::string_view message, int32_t n, ReceivedFeature* out);

}  // namespace sluice

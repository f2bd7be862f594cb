// The feature values of one record, as FeatureExtractor reads them from its Example and a batch
// slot holds them until the batch is sent: one FeatureValues per array of the schema
// (FeatureSchema::arrays()). Reused record after record: Clear keeps the capacity, and TrimTo
// gives back what is over the slot's reserve.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/feature_schema.h"
#include "formats/status.h"

namespace sluice {

// One array's rows for one record.
struct FeatureValues {
  // rows × row_values values: int64 or float32, native byte order (little-endian on every
  // supported host); BYTES: the values concatenated.
  std::string data;
  std::vector<uint32_t> sizes;  // BYTES: each value's length, rows × row_values of them
  uint32_t rows = 0;            // 1 for a fixed-size array; boxes for "boxes"/"box_labels"

  void Clear() {
    data.clear();
    sizes.clear();
    rows = 0;
  }
  int64_t bytes() const {
    return static_cast<int64_t>(data.size() + sizes.size() * sizeof(uint32_t));
  }
  // bytes() at capacity: what the array holds whatever its values.
  int64_t capacity_bytes() const {
    return static_cast<int64_t>(data.capacity() + sizes.capacity() * sizeof(uint32_t));
  }
  // Gives back the capacity over the values (kept).
  void Shrink();
};

struct SampleFeatures {
  std::vector<FeatureValues> arrays;  // FeatureSchema::arrays() order

  // `count` arrays, each cleared.
  void Reset(size_t count);
  // What a padding sample with no record to repeat carries: no rows in a ragged array, zeros
  // (empty strings) in a fixed-size one.
  void SetEmpty(const FeatureSchema& schema);
  // Bytes of values held (data and sizes of every array).
  int64_t bytes() const;
  // Bytes the ragged arrays hold: what FeatureSchema::max_feature_bytes bounds.
  int64_t ragged_bytes(const FeatureSchema& schema) const;
  // Bytes of capacity held by every array (FeatureValues::capacity_bytes).
  int64_t capacity_bytes() const;
  // Keeps the memory of a reused slot within its reserve (FeatureSchema::slot_bytes(), what the
  // batch pool accounts it at): when capacity_bytes() is over `bytes`, shrinks the arrays with
  // the most spare capacity first until it is not. Values are kept, so a slot holding more than
  // `bytes` of values keeps those; besides them the only slack is a short string's inline
  // capacity (std::string's, 15 bytes in libstdc++) in each array, which is no allocation. Under
  // `bytes` nothing is given back: a slot reused record after record keeps its buffers.
  void TrimTo(int64_t bytes);
};

// Reads a schema's features from Example wire bytes (formats/example_scanner.h: no protobuf parse;
// protobuf's rules for repeated keys and kind changes), as tf.io.parse_example reads the same
// specs. Thread-safe (immutable); the schema must outlive it.
class FeatureExtractor {
 public:
  explicit FeatureExtractor(const FeatureSchema& schema);

  // Fills *out (Reset to the schema's arrays) with every column's values and the boxes as stored
  // (normalized to the source image, each coordinate clamped to [0, 1]; box_labels 0 when the
  // record has no label list), untransformed. InvalidArgument naming the key when a feature is
  // missing (and has no default), of another list kind, has the wrong number of values, a
  // MULTI_HOT index outside [0, length), boxes as BoxOptions refuses them, more than max_boxes,
  // or the ragged values take more than max_feature_bytes; DataLoss when the record is malformed.
  Status Extract(std::string_view record, SampleFeatures* out) const;

 private:
  const FeatureSchema& schema_;
  // The distinct keys the schema reads; each column's and each box list's index among them
  // (xmin, ymin, xmax, ymax, label).
  std::vector<std::string> keys_;
  std::vector<size_t> column_keys_;
  std::vector<size_t> box_keys_;
};

}  // namespace sluice

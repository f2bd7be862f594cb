// Reads tf.train.Example records straight from their wire bytes, without a protobuf parse and
// without allocating: values come back as views into the record. It follows protobuf's rules so it
// agrees with a full parse: repeated Features messages merge, a key that appears again replaces the
// earlier entry, numeric lists may be packed or not, a Feature that sets a second kind keeps only
// the last, and unknown fields (or known ones with an unexpected wire type; groups too) are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "formats/status.h"

namespace sluice {

enum class FeatureKind { kNone, kBytes, kFloat, kInt64 };
// "none", "bytes_list", "float_list", "int64_list"
std::string_view FeatureKindName(FeatureKind kind);

// Receives the values of one feature. Returning false stops the walk early.
class FeatureValueVisitor {
 public:
  virtual ~FeatureValueVisitor() = default;
  virtual bool OnBytes(std::string_view) { return true; }
  virtual bool OnFloat(float) { return true; }
  virtual bool OnInt64(int64_t) { return true; }
};

// One feature of a record: its kind and where its values lie. Views into the record; valid while
// the record's bytes are.
class FeatureView {
 public:
  FeatureView() = default;

  FeatureKind kind() const { return kind_; }
  // Visits the values in order. DataLoss when the list's bytes are malformed.
  Status Visit(FeatureValueVisitor& visitor) const;
  // Number of values.
  Result<size_t> Count() const;
  // The first value; InvalidArgument naming `key` when the kind differs or the list is empty.
  Result<std::string_view> FirstBytes(std::string_view key) const;
  Result<int64_t> FirstInt64(std::string_view key) const;

 private:
  friend class FeatureScanner;
  std::string_view entry_;  // the map entry message (key and value fields)
  FeatureKind kind_ = FeatureKind::kNone;
  // The values are the kind's fields at or after this position: (offset of the value field within
  // entry_, offset of the list field within that value). Earlier ones were cleared by a kind change.
  size_t start_value_ = 0;
  size_t start_list_ = 0;
};

// Receives each feature map entry in wire order; a key can come more than once (the last one is
// what protobuf keeps).
class FeatureEntryVisitor {
 public:
  virtual ~FeatureEntryVisitor() = default;
  virtual void OnFeature(std::string_view key, const FeatureView& feature) = 0;
};

class FeatureScanner {
 public:
  // Walks every feature entry of an Example. DataLoss "malformed tf.train.Example: ... at byte N"
  // when the record is not a valid Example.
  static Status ForEach(std::string_view record, FeatureEntryVisitor& visitor);
  // The feature protobuf would keep for key; *found = false when there is none.
  static Status Find(std::string_view record, std::string_view key, FeatureView* feature,
                     bool* found);

 private:
  static Status ParseEntry(std::string_view entry, size_t entry_offset, std::string_view* key,
                           FeatureView* feature);
};

// Lambda adapters.
template <typename Fn>
Status ForEachFeature(std::string_view record, Fn&& fn) {
  struct Adapter : FeatureEntryVisitor {
    explicit Adapter(Fn& f) : f(f) {}
    void OnFeature(std::string_view key, const FeatureView& feature) override { f(key, feature); }
    Fn& f;
  } adapter(fn);
  return FeatureScanner::ForEach(record, adapter);
}

// The distinct feature keys of a record in wire order, comma-separated, for error messages: at
// most 16, each cut at 64 characters, non-printable bytes as '?'; "(none)" when it has none.
// Walks the record once more, so only error paths call it.
std::string DescribeKeys(std::string_view record);

// Pulls the image bytes and integer label a training pipeline needs from each record.
// Thread-safe (immutable after construction).
class ExampleScanner {
 public:
  ExampleScanner(std::string image_key, std::string label_key)
      : image_key_(std::move(image_key)), label_key_(std::move(label_key)) {}

  // *image views the first value of the image feature (bytes_list), *label is the first value of
  // the label feature (int64_list). InvalidArgument naming the key when either is missing (with
  // the record's keys, DescribeKeys), empty or of another kind; DataLoss when the record is
  // malformed. An empty label_key scans an unlabeled record (PipelineOptions.unlabeled): no label
  // is read and *label is 0.
  Status Scan(std::string_view record, std::string_view* image, int64_t* label) const;

  const std::string& image_key() const { return image_key_; }
  const std::string& label_key() const { return label_key_; }

 private:
  std::string image_key_;
  std::string label_key_;
};

}  // namespace sluice

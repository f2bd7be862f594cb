// What the pipeline hands its consumer: N images (of the transform list's dtype and layout; NHWC
// uint8 by default) and N int32 labels in one pooled
// buffer, with the batch's position in the stream. Move-only; destroying it returns the buffer to
// the pool and lets the pipeline run ahead again, so a consumer that holds batches slows the
// pipeline instead of growing its memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "formats/dtype.h"
#include "formats/sample_features.h"

namespace sluice {

// Storage for one batch: images and labels, allocated once and reused; with equal shares a valid
// mask, with record ids the samples' files and record numbers (null otherwise); with a feature
// schema each slot's feature values.
struct BatchBuffer {
  // feature_arrays: FeatureSchema::array_count() (0: no features); feature_slot_bytes:
  // FeatureSchema::slot_bytes(), what each slot's features are accounted at in bytes().
  BatchBuffer(int capacity, int height, int width, bool with_valid = false, bool with_ids = false,
              DType dtype = DType::kUint8, Layout layout = Layout::kNhwc, bool with_mix = false,
              size_t feature_arrays = 0, int64_t feature_slot_bytes = 0);
  ~BatchBuffer();
  BatchBuffer(const BatchBuffer&) = delete;
  BatchBuffer& operator=(const BatchBuffer&) = delete;

  uint8_t* image(int slot) { return images + static_cast<size_t>(slot) * image_bytes; }
  // The images and each slot's feature reserve: what the batch pool accounts.
  size_t bytes() const {
    return static_cast<size_t>(capacity) * (image_bytes + static_cast<size_t>(feature_slot_bytes));
  }

  const int capacity;
  const int height;
  const int width;
  const DType dtype;
  const Layout layout;
  const size_t image_bytes;  // height * width * 3 values of dtype
  const int64_t feature_slot_bytes;
  uint8_t* images;  // capacity * image_bytes, 64-byte aligned
  int32_t* labels;  // capacity
  std::unique_ptr<uint8_t[]> valid;           // capacity; 1 = real sample, 0 = padding
  std::unique_ptr<int32_t[]> record_files;    // capacity; index into ResolvedOptions::files
  std::unique_ptr<int64_t[]> record_indexes;  // capacity; record number within the file
  // With mixup / cutmix: sample i is label_weights[i] of labels[i] and the rest of
  // mixed_labels[i] (Batcher).
  std::unique_ptr<int32_t[]> mixed_labels;  // capacity
  std::unique_ptr<float[]> label_weights;   // capacity
  // Per slot, with a feature schema: the record's features (Augmenter writes them with its
  // image; Batcher moves and copies them with it). Empty without one.
  std::vector<SampleFeatures> features;
};

// Takes buffers back when batches are released. Thread-safe; kept alive by the batches it lent.
class BatchRecycler {
 public:
  virtual ~BatchRecycler() = default;
  // items: the in-flight records the batch accounted for (one per image).
  virtual void Recycle(BatchBuffer* buffer, uint64_t items) = 0;
};

// Where a batch sits in its stream. A stream restarted at {epoch, index + 1, end_record} of a
// batch (Pipeline::MakeIterator) continues with exactly the batches that followed it.
struct BatchPosition {
  int64_t epoch = 0;
  int64_t index = 0;       // batch number within the epoch
  // Records of the epoch, in stream order and counting skipped ones, up to this batch's last
  // image (as a start position: records to pass over before the first image).
  int64_t end_record = 0;
  // The shuffle buffer's byte share that made the epoch's order (ResolvedOptions::
  // shuffle_budget_bytes; 0 without a shuffle buffer). As a start position: 0 is not checked, any
  // other value must be the pipeline's.
  int64_t shuffle_bytes = 0;
  bool operator==(const BatchPosition&) const = default;
};

class Batch {
 public:
  Batch() = default;
  // padded: the last `padded` samples repeat earlier ones (equal shares); they hold no in-flight
  // record.
  Batch(std::shared_ptr<BatchRecycler> recycler, BatchBuffer* buffer, int size,
        BatchPosition position, uint64_t skipped, int padded = 0)
      : recycler_(std::move(recycler)),
        buffer_(buffer),
        size_(size),
        position_(position),
        skipped_(skipped),
        padded_(padded) {}
  ~Batch() { Release(); }
  Batch(Batch&& other) noexcept { *this = std::move(other); }
  Batch& operator=(Batch&& other) noexcept {
    if (this != &other) {
      Release();
      recycler_ = std::move(other.recycler_);
      buffer_ = other.buffer_;
      size_ = other.size_;
      position_ = other.position_;
      skipped_ = other.skipped_;
      padded_ = other.padded_;
      other.buffer_ = nullptr;
    }
    return *this;
  }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  bool valid() const { return buffer_ != nullptr; }
  int size() const { return size_; }  // images; < batch_size only for a last partial batch
  int height() const { return buffer_->height; }
  int width() const { return buffer_->width; }
  DType dtype() const { return buffer_->dtype; }
  Layout layout() const { return buffer_->layout; }
  BatchPosition position() const { return position_; }
  // Records skipped (corrupt or unusable) since the previous batch of the run, so possibly at
  // the end of the epoch before; those after the last batch: Iterator::SkippedAfterLastBatch.
  uint64_t skipped() const { return skipped_; }

  std::span<const uint8_t> images() const {
    return {buffer_->images, static_cast<size_t>(size_) * buffer_->image_bytes};
  }
  std::span<const int32_t> labels() const {
    return {buffer_->labels, static_cast<size_t>(size_)};
  }
  const uint8_t* image(int i) const { return buffer_->image(i); }
  // Padding samples at the batch's end (equal shares); they are marked 0 in valid_mask().
  int padded() const { return padded_; }
  // Per sample, 1 = real, 0 = padding: empty when every sample is real.
  std::span<const uint8_t> valid_mask() const {
    if (padded_ == 0) return {};
    return {buffer_->valid.get(), static_cast<size_t>(size_)};
  }
  // Per sample, its file (index into the options' files) and record number in it: empty unless
  // the pipeline runs with record_ids. A padding sample names the record it repeats (-1 for a
  // zero image: see Batcher).
  std::span<const int32_t> record_files() const {
    if (!buffer_->record_files) return {};
    return {buffer_->record_files.get(), static_cast<size_t>(size_)};
  }
  std::span<const int64_t> record_indexes() const {
    if (!buffer_->record_indexes) return {};
    return {buffer_->record_indexes.get(), static_cast<size_t>(size_)};
  }

  // Per sample, with mixup or cutmix: the label each sample was mixed with and the weight of its
  // own label. Empty otherwise.
  std::span<const int32_t> mixed_labels() const {
    if (!buffer_->mixed_labels) return {};
    return {buffer_->mixed_labels.get(), static_cast<size_t>(size_)};
  }
  std::span<const float> label_weights() const {
    if (!buffer_->label_weights) return {};
    return {buffer_->label_weights.get(), static_cast<size_t>(size_)};
  }

  // Per sample, its features (FeatureSchema::arrays() order): empty without a feature schema.
  std::span<const SampleFeatures> features() const {
    if (buffer_->features.empty()) return {};
    return {buffer_->features.data(), static_cast<size_t>(size_)};
  }

  // Gives the buffer back now (also done by the destructor).
  void Release() {
    if (buffer_ != nullptr) {
      recycler_->Recycle(buffer_, static_cast<uint64_t>(size_ - padded_));
      buffer_ = nullptr;
      recycler_.reset();
    }
  }

 private:
  std::shared_ptr<BatchRecycler> recycler_;
  BatchBuffer* buffer_ = nullptr;
  int size_ = 0;
  BatchPosition position_;
  uint64_t skipped_ = 0;
  int padded_ = 0;
};

}  // namespace sluice

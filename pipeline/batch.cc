#include "pipeline/batch.h"

#include <cstdlib>
#include <new>

namespace sluice {

BatchBuffer::BatchBuffer(int capacity, int height, int width, bool with_valid, bool with_ids,
                         DType dtype, Layout layout, bool with_mix, size_t feature_arrays,
                         int64_t feature_slot_bytes)
    : capacity(capacity),
      height(height),
      width(width),
      dtype(dtype),
      layout(layout),
      image_bytes(static_cast<size_t>(height) * width * 3 * DTypeSize(dtype)),
      feature_slot_bytes(feature_arrays > 0 ? feature_slot_bytes : 0) {
  size_t bytes = (static_cast<size_t>(capacity) * image_bytes + 63) / 64 * 64;
  images = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  labels = new int32_t[capacity]();
  if (images == nullptr) throw std::bad_alloc();
  if (with_valid) valid = std::make_unique<uint8_t[]>(capacity);
  if (with_ids) {
    record_files = std::make_unique<int32_t[]>(capacity);
    record_indexes = std::make_unique<int64_t[]>(capacity);
  }
  if (with_mix) {
    mixed_labels = std::make_unique<int32_t[]>(capacity);
    label_weights = std::make_unique<float[]>(capacity);
  }
  if (feature_arrays > 0) {
    features.resize(static_cast<size_t>(capacity));
    for (SampleFeatures& f : features) f.Reset(feature_arrays);
  }
}

BatchBuffer::~BatchBuffer() {
  std::free(images);
  delete[] labels;
}

}  // namespace sluice

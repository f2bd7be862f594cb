// The Batch message (proto/sluice/v1/service.proto) on the wire without protobuf's copies. The
// server sends every field but `images` as a small prefix and then the image bytes as a slice of
// its pooled batch buffer; the client parses the prefix and copies the images once, straight into
// a buffer of its own. Any protobuf parser reads the same bytes as a plain v1::Batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/wire/buffer_allocator.h"
#include "client/wire/feature_wire.h"
#include "formats/dtype.h"
#include "formats/status.h"

namespace grpc {
class ByteBuffer;
}

namespace sluice {

// Trailing metadata of a stream whose job skipped records after its last batch: their number, in
// decimal (service.proto, Batch.skipped_records).
inline constexpr const char* kSkippedRecordsKey = "sluice-skipped-records";

struct BatchMeta {
  int64_t epoch = 0;
  int64_t index = 0;
  int64_t end_record = 0;
  int64_t shuffle_bytes = 0;
  int32_t n = 0, height = 0, width = 0, channels = 3;
  uint64_t skipped_records = 0;
  // The images' element type and layout (formats/dtype.h); shape is [n, height, width, channels]
  // for NHWC, [n, channels, height, width] for NCHW.
  DType dtype = DType::kUint8;
  Layout layout = Layout::kNhwc;

  size_t image_bytes() const {
    return static_cast<size_t>(n) * height * width * channels * DTypeSize(dtype);
  }
};

// Per-sample extras of a batch (service.proto Batch.valid, record_files, record_indexes);
// empty spans are not written.
struct BatchExtras {
  std::span<const uint8_t> valid;  // 1 = real sample, 0 = padding; empty: all real
  std::span<const int32_t> record_files;
  std::span<const int64_t> record_indexes;
  // Mixup / cutmix (Batch.mixed_labels, label_weights): both or neither.
  std::span<const int32_t> mixed_labels;
  std::span<const float> label_weights;
  // Batch.features entries as EncodeFeatureArrays wrote them, copied as they are.
  std::string_view features;
};

// The serialized Batch up to and including the tag and length of `images`; appending
// meta.image_bytes() image bytes completes the message. valid is written (packed bool) only
// when some sample is padding; dtype and layout each only when not 0 (proto3: a uint8 NCHW
// batch carries layout alone; a uint8 NHWC batch is the bytes it was before dtypes existed);
// shape in meta.layout's order; extras.features before the images. Empty labels: an unlabeled
// batch.
std::string EncodeBatchPrefix(const BatchMeta& meta, std::span<const int32_t> labels,
                              const BatchExtras& extras = {});

// The whole serialized Batch of a shared-memory stream: meta, labels, extras, and where the
// images are (SharedMemoryRef {slot, meta.image_bytes()}) instead of the images.
std::string EncodeSharedBatch(const BatchMeta& meta, std::span<const int32_t> labels, uint32_t slot,
                              const BatchExtras& extras = {});

class SharedSegment;

// Where DecodeBatch puts a batch's arrays; grown as needed and reused across batches.
struct BatchArrays {
  explicit BatchArrays(std::shared_ptr<BufferAllocator> allocator = HeapAllocator())
      : images(std::move(allocator)) {}

  HostBuffer images;  // capacity() at least the batch's image_bytes()
  std::vector<int32_t> labels;
  // Per sample, each empty when the batch does not carry it (service.proto Batch.valid,
  // record_files, record_indexes): 1 = real sample, 0 = padding; the sample's file and record.
  std::vector<uint8_t> valid;
  std::vector<int32_t> record_files;
  std::vector<int64_t> record_indexes;
  std::vector<int32_t> mixed_labels;  // with label_weights: Batch.mixed_labels, label_weights
  std::vector<float> label_weights;
  // Batch.features, in the message's order; `features.size()` may exceed feature_count (kept
  // for reuse): the batch's are the first feature_count.
  std::vector<ReceivedFeature> features;
  size_t feature_count = 0;
  std::vector<std::string> feature_messages;  // scratch: each FeatureArray as it came
  // A batch whose images are in a shared-memory slot: DecodeBatch sets `shared` and shared_slot;
  // the client then points shared_images into its mapping of `segment` (and frees the slot when
  // the batch is released).
  bool shared = false;
  uint32_t shared_slot = 0;
  std::shared_ptr<SharedSegment> segment;
  const uint8_t* shared_images = nullptr;

  const uint8_t* image_data() const {
    return shared_images != nullptr ? shared_images : images.data();
  }
};

// Parses a serialized Batch as gRPC received it, copying the images once into out->images (or,
// for a shared-memory batch, only noting its slot: out->shared).
// DataLoss naming the field when the message is malformed or its shape disagrees with its
// images, labels or per-sample fields: a dtype or layout that formats/dtype.h does not know; a
// shape that is not [N, H, W, 3] (NHWC) or [N, 3, H, W] (NCHW); images of other than
// N·H·W·3·DTypeSize bytes; valid, record_files, record_indexes, mixed_labels and label_weights
// each N values or none, the record ids both or neither, mixed_labels and label_weights both or
// neither, each weight finite and in [0, 1]; labels N values or none (an unlabeled dataset); each
// feature as DecodeFeatureArray checks it against N. The allocator's status, naming the byte count,
// when out->images cannot grow.
Status DecodeBatch(grpc::ByteBuffer* buffer, BatchMeta* meta, BatchArrays* out);

}  // namespace sluice

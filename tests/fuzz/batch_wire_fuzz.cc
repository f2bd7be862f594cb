// The client's parse of a Batch message as gRPC hands it over (DecodeBatch, reading the slices in
// place) against protobuf's parse of the same bytes: whatever a server sends, DecodeBatch either
// refuses it as DataLoss or yields exactly what a v1::Batch holds, with a shape that describes
// the image bytes it really has — never a count of images it does not have.
//
// Input: byte 0 seeds where the message is cut into gRPC slices (a message arrives in many); the
// rest is the message.
#include <grpc/grpc.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "client/wire/batch_wire.h"
#include "sluice/v1/service.pb.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  static const bool grpc_ready = (grpc_init(), true);
  (void)grpc_ready;
  if (size < 1) return 0;
  const std::string message(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<grpc::Slice> slices;
  uint32_t state = data[0] * 2654435761u | 1;
  for (size_t at = 0; at < message.size();) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    const size_t n = std::min<size_t>(message.size() - at, 1 + state % 64);
    slices.emplace_back(message.data() + at, n);
    at += n;
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());

  BatchMeta meta;
  BatchArrays arrays;
  const Status s = DecodeBatch(&buffer, &meta, &arrays);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == StatusCode::kDataLoss, "%s", s.ToString().c_str());
    return 0;
  }
  v1::Batch batch;
  FUZZ_CHECK(batch.ParseFromString(message), "DecodeBatch accepts what protobuf refuses");
  FUZZ_CHECK(static_cast<int32_t>(batch.dtype()) == static_cast<int32_t>(meta.dtype) &&
                 static_cast<int32_t>(batch.layout()) == static_cast<int32_t>(meta.layout),
             "dtype or layout differs");
  const bool nchw = meta.layout == Layout::kNchw;
  FUZZ_CHECK(batch.shape_size() == 4 && batch.shape(0) == meta.n &&
                 batch.shape(nchw ? 2 : 1) == meta.height &&
                 batch.shape(nchw ? 3 : 2) == meta.width &&
                 batch.shape(nchw ? 1 : 3) == meta.channels && meta.channels == 3,
             "shape differs");
  FUZZ_CHECK(batch.position().epoch() == meta.epoch && batch.position().index() == meta.index &&
                 batch.position().end_record() == meta.end_record,
             "position differs: protobuf %lld:%lld:%lld, DecodeBatch %lld:%lld:%lld",
             (long long)batch.position().epoch(), (long long)batch.position().index(),
             (long long)batch.position().end_record(), (long long)meta.epoch, (long long)meta.index,
             (long long)meta.end_record);
  FUZZ_CHECK(batch.skipped_records() == meta.skipped_records, "skipped_records differs");
  FUZZ_CHECK(std::vector<int32_t>(batch.labels().begin(), batch.labels().end()) == arrays.labels,
             "labels differ");
  FUZZ_CHECK(std::vector<uint8_t>(batch.valid().begin(), batch.valid().end()) == arrays.valid,
             "valid differs");
  FUZZ_CHECK(std::vector<int32_t>(batch.record_files().begin(), batch.record_files().end()) ==
                 arrays.record_files,
             "record_files differ");
  FUZZ_CHECK(std::vector<int64_t>(batch.record_indexes().begin(), batch.record_indexes().end()) ==
                 arrays.record_indexes,
             "record_indexes differ");
  FUZZ_CHECK(std::vector<int32_t>(batch.mixed_labels().begin(), batch.mixed_labels().end()) ==
                 arrays.mixed_labels,
             "mixed_labels differ");
  FUZZ_CHECK(arrays.label_weights.size() == static_cast<size_t>(batch.label_weights_size()) &&
                 std::equal(arrays.label_weights.begin(), arrays.label_weights.end(),
                            batch.label_weights().begin()),
             "label_weights differ");
  for (float w : arrays.label_weights) FUZZ_CHECK(w >= 0 && w <= 1, "label weight %g", w);
  // Consumers index the per-sample fields by image: each is N long or empty.
  for (const size_t size :
       {arrays.valid.size(), arrays.record_files.size(), arrays.record_indexes.size(),
        arrays.mixed_labels.size(), arrays.label_weights.size()}) {
    FUZZ_CHECK(size == 0 || size == static_cast<size_t>(meta.n), "%zu values for %d images", size,
               meta.n);
  }
  // The shape's byte count, without wrapping: what a consumer will index.
  const unsigned __int128 bytes = static_cast<unsigned __int128>(meta.n) * meta.height *
                                  meta.width * meta.channels * DTypeSize(meta.dtype);
  FUZZ_CHECK(bytes == meta.image_bytes(), "shape %dx%dx%dx%d wraps image_bytes() to %zu", meta.n,
             meta.height, meta.width, meta.channels, meta.image_bytes());
  if (arrays.shared) {
    FUZZ_CHECK(batch.has_shared_memory() && batch.images().empty(), "shared batch differs");
    FUZZ_CHECK(batch.shared_memory().slot() == arrays.shared_slot, "slot differs");
    FUZZ_CHECK(batch.shared_memory().length() == meta.image_bytes(), "length differs");
  } else {
    FUZZ_CHECK(!batch.has_shared_memory(), "shared_memory set, DecodeBatch says not shared");
    FUZZ_CHECK(batch.images().size() == meta.image_bytes(), "%zu image bytes for a shape of %zu",
               batch.images().size(), meta.image_bytes());
    FUZZ_CHECK(arrays.images.capacity() >= meta.image_bytes(), "image buffer too small");
    FUZZ_CHECK(meta.image_bytes() == 0 || std::memcmp(arrays.images.data(), batch.images().data(),
                                                      meta.image_bytes()) == 0,
               "images differ");
  }
  return 0;
}

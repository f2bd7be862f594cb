// Shared by the Batch codec's tests: a message framed as the server or any other sender frames
// it, and DecodeBatch's verdict on bytes that should not decode.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/wire/batch_wire.h"

namespace sluice::wire_testing {

// `bytes` as one slice: a serialized Batch as protobuf or any other sender writes it.
inline grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

// The socket encoding as the server sends it: the prefix, then the images as their own slice.
inline grpc::ByteBuffer ServerBuffer(const BatchMeta& m, const std::vector<int32_t>& labels,
                                     const std::string& images, const BatchExtras& extras = {}) {
  grpc::Slice slices[2] = {grpc::Slice(EncodeBatchPrefix(m, labels, extras)), grpc::Slice(images)};
  return grpc::ByteBuffer(slices, 2);
}

// What DecodeBatch says of `bytes` sent as one slice; what it decoded is dropped.
inline Status DecodeStatus(const std::string& bytes) {
  grpc::ByteBuffer b = Buffer(bytes);
  BatchMeta got;
  BatchArrays arrays;
  return DecodeBatch(&b, &got, &arrays);
}

}  // namespace sluice::wire_testing

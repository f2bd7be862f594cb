// The bodies of the float path's kernels (resize_kernels.h), internal to formats/: included by
// resize_kernels_portable.cc, compiled for the baseline ISA, and by resize_kernels_x86.cc, inlined
// into functions compiled for AVX2. One source, so one order of operations: every output sums its
// taps k = 0 first, vectorized only across outputs, and neither build enables FMA, so each
// multiply and add rounds separately. Both give identical bytes, on any CPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/resize_filter.h"

namespace sluice::resize_internal {

#define SLUICE_FLOAT_KERNEL_INLINE __attribute__((always_inline)) inline

// kBlock outputs of VerticalFloat at out[0..kBlock): a fixed trip count, which the compiler
// vectorizes.
template <size_t kBlock>
SLUICE_FLOAT_KERNEL_INLINE void VerticalFloatBlock(const uint8_t* const* rows, size_t j0,
                                                   const float* w, int taps, float* out) {
  // Starting from tap 0's products rather than zeros: the same sums (0 + p is p), and the
  // accumulators stay in registers.
  float acc[kBlock];
  for (size_t j = 0; j < kBlock; ++j) acc[j] = w[0] * static_cast<float>(rows[0][j0 + j]);
  for (int k = 1; k < taps; ++k) {
    const uint8_t* in = rows[k] + j0;
    const float wk = w[k];
    for (size_t j = 0; j < kBlock; ++j) acc[j] += wk * static_cast<float>(in[j]);
  }
  for (size_t j = 0; j < kBlock; ++j) out[j] = acc[j];
}

// v[j] clamped to 0..255 and rounded to the nearest integer, ties to even, for j < kLanes:
// adding 2^23 leaves no fraction bits, so the addition itself rounds (in the default rounding
// mode), exactly, for any value in range. No libm call or branch: the loops vectorize.
template <int kLanes>
SLUICE_FLOAT_KERNEL_INLINE void RoundToBytes(const float* v, int32_t* out) {
  constexpr float kNoFraction = 8388608.0f;  // 2^23
  float clamped[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    const float low = v[j] > 0.0f ? v[j] : 0.0f;
    clamped[j] = low < 255.0f ? low : 255.0f;
  }
  for (int j = 0; j < kLanes; ++j) {
    out[j] = static_cast<int32_t>((clamped[j] + kNoFraction) - kNoFraction);
  }
}

SLUICE_FLOAT_KERNEL_INLINE void VerticalFloatBody(const uint8_t* const* rows, const float* w,
                                                  int taps, size_t n, float* out) {
  constexpr size_t kBlock = 32;
  size_t j = 0;
  for (; j + kBlock <= n; j += kBlock) VerticalFloatBlock<kBlock>(rows, j, w, taps, out + j);
  for (; j < n; ++j) VerticalFloatBlock<1>(rows, j, w, taps, out + j);
}

// Output pixels [0, f.out_size) of HorizontalFloatBody from its tile, mirrored when kFlip.
template <bool kFlip>
SLUICE_FLOAT_KERNEL_INLINE void HorizontalFloatPixels(const float* tile, uint8_t* const* out,
                                                      const FloatFilter& f) {
  constexpr int kLanes = 4 * kRowsPerStep;
  const int n = f.out_size, taps = f.taps;
  // Locals, not f's vectors or out[]: the byte stores below may alias anything, which would make
  // the compiler reload those after every store.
  const int* start = f.start.data();
  const int* count = f.count.data();
  const float* weights = f.weights.data();
  uint8_t* const rows[kRowsPerStep] = {out[0], out[1], out[2], out[3]};
  for (int x = 0; x < n; ++x) {
    const float* w = weights + static_cast<size_t>(x) * taps;
    const float* t = tile + static_cast<size_t>(start[x]) * kLanes;
    float acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = w[0] * t[j];
    for (int k = 1, end = count[x]; k < end; ++k) {
      const float wk = w[k];
      for (int j = 0; j < kLanes; ++j) acc[j] += wk * t[static_cast<size_t>(k) * kLanes + j];
    }
    int32_t bytes[kLanes];
    RoundToBytes<kLanes>(acc, bytes);
    // packed[1 + 4r ..]: row r's r g b; one 4-byte store writes them and one byte of the pixel
    // written next (after it, or before it when mirrored), except at the row's last one.
    uint8_t packed[kLanes + 1] = {};
    for (int j = 0; j < kLanes; ++j) packed[j + 1] = static_cast<uint8_t>(bytes[j]);
    const size_t at = size_t{3} * (kFlip ? n - 1 - x : x);
    if (x + 1 < n) {
      for (int r = 0; r < kRowsPerStep; ++r) {
        if (kFlip) {
          std::memcpy(rows[r] + at - 1, packed + 4 * r, 4);
        } else {
          std::memcpy(rows[r] + at, packed + 4 * r + 1, 4);
        }
      }
    } else {
      for (int r = 0; r < kRowsPerStep; ++r) std::memcpy(rows[r] + at, packed + 4 * r + 1, 3);
    }
  }
}

// As HorizontalPortable: the rows transposed into a tile of 16 floats per source pixel (r g b 0
// of each row), so that a tap is one multiply-add over 16 contiguous lanes.
SLUICE_FLOAT_KERNEL_INLINE void HorizontalFloatBody(const float* const* in, uint8_t* const* out,
                                                    const FloatFilter& f, bool flip,
                                                    std::vector<float>* tile_storage) {
  constexpr int kLanes = 4 * kRowsPerStep;
  const size_t width = static_cast<size_t>(f.in_size);
  if (tile_storage->size() < width * kLanes) tile_storage->resize(width * kLanes);
  float* tile = tile_storage->data();
  const float* const from_rows[kRowsPerStep] = {in[0], in[1], in[2], in[3]};
  for (int p = 0; p < f.in_size; ++p) {
    float* to = tile + static_cast<size_t>(p) * kLanes;
    for (int r = 0; r < kRowsPerStep; ++r) {
      const float* from = from_rows[r] + size_t{3} * p;
      to[4 * r] = from[0];
      to[4 * r + 1] = from[1];
      to[4 * r + 2] = from[2];
      to[4 * r + 3] = 0.0f;
    }
  }
  if (flip) {
    HorizontalFloatPixels<true>(tile, out, f);
  } else {
    HorizontalFloatPixels<false>(tile, out, f);
  }
}

#undef SLUICE_FLOAT_KERNEL_INLINE

}  // namespace sluice::resize_internal

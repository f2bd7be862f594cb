#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/resize_float_kernels.h"
#include "formats/resize_kernels.h"

namespace sluice::resize_internal {
namespace {

// kBlock outputs of VerticalPortable at out[0..kBlock): a fixed trip count, and the product in the
// (16-bit value * 16-bit weight) >> 16 form, let the compiler vectorize it into pmulhuw.
template <size_t kBlock>
inline void VerticalPortableBlock(const uint8_t* const* rows, size_t j0, const uint16_t* w,
                                  int taps, uint8_t* out) {
  uint16_t acc[kBlock];
  const uint16_t round = static_cast<uint16_t>(128 + taps / 2);
  for (size_t j = 0; j < kBlock; ++j) acc[j] = round;
  for (int k = 0; k < taps; ++k) {
    const uint8_t* in = rows[k] + j0;
    const uint32_t wk = w[k];
    for (size_t j = 0; j < kBlock; ++j) {
      const uint16_t value = static_cast<uint16_t>(in[j] << 8);
      acc[j] = static_cast<uint16_t>(acc[j] + ((value * wk) >> 16));
    }
  }
  for (size_t j = 0; j < kBlock; ++j) out[j] = static_cast<uint8_t>(acc[j] >> 8);
}

}  // namespace

void VerticalFloat(const uint8_t* const* rows, const float* w, int taps, size_t n, float* out) {
  VerticalFloatBody(rows, w, taps, n, out);
}

void HorizontalFloat(const float* const* in, uint8_t* const* out, const FloatFilter& f, bool flip,
                     std::vector<float>* tile) {
  HorizontalFloatBody(in, out, f, flip, tile);
}

// out[j] for j < n from rows[0..taps), as described at the top.
void VerticalPortable(const uint8_t* const* rows, const uint16_t* w, int taps, size_t n,
                      uint8_t* out) {
  if (taps > kMaxVerticalFastTaps) {
    for (size_t j = 0; j < n; ++j) {
      uint32_t acc = kVerticalOne / 2;
      for (int k = 0; k < taps; ++k) acc += rows[k][j] * static_cast<uint32_t>(w[k]);
      out[j] = static_cast<uint8_t>(acc >> 16);
    }
    return;
  }
  constexpr size_t kBlock = 32;
  size_t j = 0;
  for (; j + kBlock <= n; j += kBlock) VerticalPortableBlock<kBlock>(rows, j, w, taps, out + j);
  for (; j < n; ++j) VerticalPortableBlock<1>(rows, j, w, taps, out + j);
}

// The four rows are first transposed into a tile where each source pixel is 16 bytes (r g b and a
// spare byte for each row), so that a tap is one multiply-add over 16 contiguous lanes for all the
// rows, which the compiler vectorizes.
void HorizontalPortable(const uint8_t* const* in, uint8_t* const* out, const HorizontalFilter& f,
                        bool flip, std::vector<uint8_t>* tile_storage) {
  constexpr int kLanes = 4 * kRowsPerStep;
  const int n = f.out_size, slots = 2 * f.pairs;
  const bool grouped = f.pairs >= kPairsPerGroup;
  // Pixels the taps reach: the row, then taps past its end, whose weights are zero (there the
  // tile keeps whatever bytes it held). Each pixel is copied as 4 bytes, its fourth lane taking
  // the next pixel's red (or the row's padding), which no output reads.
  const int width = static_cast<int>(f.overread() / 3) + f.in_size;
  if (tile_storage->size() < static_cast<size_t>(width) * kLanes) {
    tile_storage->resize(static_cast<size_t>(width) * kLanes);
  }
  uint8_t* tile = tile_storage->data();
  for (int p = 0; p < f.in_size; ++p) {
    for (int r = 0; r < kRowsPerStep; ++r) {
      std::memcpy(tile + static_cast<size_t>(p) * kLanes + size_t{4} * r, in[r] + size_t{3} * p, 4);
    }
  }
  const int* start = f.start.data();
  const int16_t* weights = f.weights.data();
  for (int x = 0; x < n; ++x) {
    const int16_t* w = weights + static_cast<size_t>(x) * slots;
    int32_t acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = kHorizontalOne / 2;
    for (int k = 0; k < slots; ++k) {
      // Weight slot k's tap: the same up to 4 taps; beyond, groups of 5 taps take 6 slots (the
      // sixth has weight 0 and reads the next group's first tap).
      const int tap = grouped ? k / 6 * kTapsPerGroup + k % 6 : k;
      const uint8_t* t = tile + static_cast<size_t>(start[x] + tap) * kLanes;
      const int16_t weight = w[k];
      for (int j = 0; j < kLanes; ++j) acc[j] += weight * static_cast<int16_t>(t[j]);
    }
    const size_t to = size_t{3} * (flip ? n - 1 - x : x);
    for (int r = 0; r < kRowsPerStep; ++r) {
      for (int c = 0; c < 3; ++c) {
        out[r][to + c] = static_cast<uint8_t>(acc[4 * r + c] >> kHorizontalShift);
      }
    }
  }
}

}  // namespace sluice::resize_internal

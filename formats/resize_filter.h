// The filters of Resizer (internal to formats/): per-axis windows and fixed-point weights, built
// once per (source, destination) size and read by the kernels of resize_kernels.h.
//
// Fixed point, and why the two passes differ.
//
// The vertical pass filters whole rows: out[j] = sum_k w[k] * row_k[j], every byte of a row with
// the same weights, so it vectorizes along the row. Weights are fractions of 65536 (uint16; a lone
// weight of 1.0 is stored as 65535) summing to exactly 65536. A sample enters as (value << 8) and
// each product keeps its high 16 bits, value * weight / 256 (one pmulhuw): the uint16 accumulator
// holds the output in 1/256 units and cannot exceed 255 * 256 plus the rounding term. Truncating a
// product loses under 1/256; the rounding term adds back taps/2 on average, so a constant image
// stays exactly constant. Past kMaxVerticalFastTaps (extreme shrinking) the losses would add up,
// and an exact 32-bit sum takes over.
//
// The horizontal pass mixes neighbouring pixels of interleaved RGB. Output pixel x reads
// consecutive source pixels from start[x]; its weights are int16 fractions of 32768 (a lone 1.0 is
// 32767) that sum to 32768, taken in pairs: one pmaddwd multiplies the pairs (r0 r1)(g0 g1)(b0 b1)
// of two taps by (w0 w1) and adds them, exactly, in 32 bits. The SIMD kernel reads 16 source bytes
// per 5 taps and shuffles them into such pairs: taps (0 1)(2 3)(4 -) of each group of 5, so the
// weights are stored in that order, 3 pairs per group (fewer when an output needs at most 2 or 4
// taps), the slot of the missing sixth tap zero. The portable kernels compute the very same sums,
// so both give identical bytes.
//
// Between the passes samples are rounded to uint8, as the passes' inputs must be bytes.
//
// The other filters (area, bicubic) take a path of their own, in float: bicubic weights are
// negative, which the unsigned vertical weights cannot hold, and its overshoot between the passes
// must not be clamped or rounded for the result to match torchvision's (which keeps float between
// its passes). FloatFilter holds an axis's weights as Pillow and torchvision's antialiased resize
// compute them; the float kernels keep every sample in float until the one rounding at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/image_ops.h"

namespace sluice::resize_internal {

inline constexpr int kVerticalOne = 1 << 16;
inline constexpr int kMaxVerticalFastTaps = 64;
inline constexpr int kHorizontalShift = 15;
inline constexpr int kHorizontalOne = 1 << kHorizontalShift;
// Taps per 16-byte load in the horizontal kernel, and the pairs they make.
inline constexpr int kTapsPerGroup = 5;
inline constexpr int kPairsPerGroup = 3;
// The horizontal kernels filter 4 rows at a time, and write 4 output pixels per step; filters are
// padded to a multiple of that.
inline constexpr int kRowsPerStep = 4;
inline constexpr int kPixelsPerStep = 4;

// Vertical weights: output row y is sum_k weights[y * taps + k] * row(start[y] + k), k < count[y].
struct VerticalFilter {
  int in_size = 0, out_size = 0;  // what it was built for; 0 when unbuilt
  int taps = 0;                   // the stride of weights
  std::vector<int> start, count;
  std::vector<uint16_t> weights;

  void Build(int in, int out);
};

// Horizontal weights, in the pair order described at the top: output pixel x reads source pixels
// from start[x], with pairs * 2 weights at weights[x * pairs * 2]. Padded with zero weights (and
// start 0) to a multiple of kPixelsPerStep pixels.
struct HorizontalFilter {
  int in_size = 0, out_size = 0;  // what it was built for; 0 when unbuilt
  int pairs = 0;
  int groups = 0;  // 16-byte loads per output pixel: ceil(pairs / kPairsPerGroup)
  std::vector<int> start;
  std::vector<int16_t> weights;
  std::vector<int16_t> plain;  // scratch: max_taps weights per output, when they need spreading
  std::vector<int> count;      // scratch

  void Build(int in, int out);

  // Bytes the kernels may read past the last source pixel (zero weights there): the last 16-byte
  // load starts at most 15 * (groups - 1) bytes into the last pixel.
  size_t overread() const { return size_t{16} * groups; }
};

// One axis of a float-path resize: output i is sum_k weights[i * taps + k] * in(start[i] + k)
// over k < count[i] (the window, inside the image, count[i] >= 1); taps is the largest count, the
// weights past an output's count zero. Built as Pillow's and torchvision's antialiased resize
// build theirs: output i centred on source coordinate (i + 0.5) * scale, the filter (triangle,
// box of half-width 0.5, or Keys cubic with a = -0.5) stretched by the scale when shrinking, each
// window cut at the image's edges and renormalised to sum to 1. An axis whose size does not
// change is a one-tap copy.
struct FloatFilter {
  ResizeFilter filter = ResizeFilter::kBilinear;
  int in_size = 0, out_size = 0;  // what it was built for; 0 when unbuilt
  int taps = 0;                   // the stride of weights
  std::vector<int> start, count;
  std::vector<float> weights;

  // REQUIRES: in > 0, out > 0.
  void Build(ResizeFilter f, int in, int out);
  bool BuiltFor(ResizeFilter f, int in, int out) const {
    return filter == f && in_size == in && out_size == out;
  }
};

}  // namespace sluice::resize_internal

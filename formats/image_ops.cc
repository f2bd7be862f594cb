#include "formats/image_ops.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace sluice {
namespace {

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
constexpr int kVerticalOne = 1 << 16;
constexpr int kMaxVerticalFastTaps = 64;
constexpr int kHorizontalShift = 15;
constexpr int kHorizontalOne = 1 << kHorizontalShift;
// Taps per 16-byte load in the horizontal kernel, and the pairs they make.
constexpr int kTapsPerGroup = 5;
constexpr int kPairsPerGroup = 3;
// The horizontal kernels filter 4 rows at a time, and write 4 output pixels per step; filters are
// padded to a multiple of that.
constexpr int kRowsPerStep = 4;
constexpr int kPixelsPerStep = 4;

// Triangle filter with pixel centres aligned: output i sits at source coordinate
// (i + 0.5) * scale - 0.5. When shrinking, the triangle is stretched by the scale, so each output
// averages the whole source area it covers (Pillow's BILINEAR). Windows cut by an image edge are
// renormalised.
//
// The filters are built for every image of a new size (random crops: nearly every image), so
// building is kept cheap: positions are integers in 1/2^20 pixel, the loops over taps run a fixed
// count (branches on varying counts would be mispredicted), and only half the outputs are
// computed, the filter being symmetric.
constexpr int kPositionBits = 20;
constexpr int64_t kPositionOne = int64_t{1} << kPositionBits;

// The triangle's radius (at least one pixel), in 1/2^20 pixel.
int64_t FilterRadius(int in, int out) {
  return std::max((int64_t{in} * kPositionOne + out / 2) / out, kPositionOne);
}

// The most taps any output has: an open interval of length 2 * radius holds at most
// ceil(2 * radius) pixel centres.
int MaxTaps(int in, int out) {
  const int64_t bound = (2 * FilterRadius(in, out) + kPositionOne - 1) >> kPositionBits;
  return static_cast<int>(std::min<int64_t>(in, bound));
}

// BuildAxis for a fixed tap count kTaps (0: taps, at run time).
template <int kTaps, typename Weight>
void BuildAxisTaps(int in, int out, int one, int taps, int stride, Weight* table, int* start,
                   int* count) {
  const int n_taps = kTaps > 0 ? kTaps : taps;
  const int64_t radius = FilterRadius(in, out);
  constexpr int64_t kHalfPixel = kPositionOne / 2;
  // Output i's centre, (2i + 1) * in / (2 * out) pixels, exactly rounded down: a quotient and
  // remainder stepped along without dividing.
  const int64_t denominator = 2 * int64_t{out};
  const int64_t step = 2 * int64_t{in} * kPositionOne;
  const int64_t step_quotient = step / denominator, step_remainder = step % denominator;
  int64_t center = int64_t{in} * kPositionOne / denominator;
  int64_t remainder = int64_t{in} * kPositionOne % denominator;
  const int half = (out + 1) / 2;
  for (int i = 0; i < half; ++i) {
    // Source pixel x (centre x + 0.5) has weight radius - |x + 0.5 - center| when it lies
    // strictly within radius of the centre: the window [first, end), cut by the image. (>> is a
    // floor division, negative numbers included.)
    const int64_t left = center - radius - kHalfPixel, right = center + radius - kHalfPixel;
    const int first = static_cast<int>(std::clamp<int64_t>((left >> kPositionBits) + 1, 0, in - 1));
    const int end = static_cast<int>(
        std::clamp<int64_t>(-((-right) >> kPositionBits), first + 1, std::min(in, first + n_taps)));
    const int64_t n = end - first;
    // Tap k lies at p0 + k pixels from the centre. The weights' total in closed form: the m taps
    // left of the centre and the n - m right of it are arithmetic series.
    const int64_t p0 = int64_t{first} * kPositionOne + kHalfPixel - center;
    const int64_t m = std::clamp<int64_t>((kPositionOne - 1 - p0) >> kPositionBits, 0, n);
    const int64_t distances = -(m * p0 + kPositionOne * (m * (m - 1) / 2)) + (n - m) * p0 +
                              kPositionOne * ((n * (n - 1) - m * (m - 1)) / 2);
    const double to_fixed = one / static_cast<double>(n * radius - distances);
    // Quantising the running sum gives non-negative weights that add up to exactly `one`
    // however the rounding falls; a lone weight of 1.0 is stored as one - 1.
    Weight* weights = table + static_cast<size_t>(i) * stride;
    int64_t cumulative = 0, position = p0;
    int previous = 0;
#pragma GCC unroll 8
    for (int k = 0; k < n_taps; ++k, position += kPositionOne) {
      const int64_t sign = position >> 63;
      // radius - |position| inside the window (where it is positive), 0 past it.
      cumulative += (radius - ((position ^ sign) - sign)) & -static_cast<int64_t>(k < n);
      // Non-negative, so adding 0.5 and truncating rounds, without a libm call per tap.
      // NOLINTNEXTLINE(bugprone-incorrect-roundings)
      const int next = static_cast<int>(static_cast<double>(cumulative) * to_fixed + 0.5);
      weights[k] = static_cast<Weight>(std::min(next - previous, one - 1));
      previous = next;
    }
    start[i] = first;
    count[i] = static_cast<int>(n);
    center += step_quotient;
    remainder += step_remainder;
    const int64_t carry = remainder >= denominator;
    center += carry;
    remainder -= carry * denominator;
  }
  // Output out - 1 - i mirrors output i: window reflected, weights reversed.
  for (int j = half; j < out; ++j) {
    const int i = out - 1 - j, n = count[i];
    start[j] = in - start[i] - n;
    count[j] = n;
    const Weight* from = table + static_cast<size_t>(i) * stride;
    Weight* to = table + static_cast<size_t>(j) * stride;
#pragma GCC unroll 8
    for (int k = 0; k < n_taps; ++k) {
      const Weight w = from[std::max(n - 1 - k, 0)];
      to[k] = k < n ? w : 0;
    }
  }
}

// Fills every output's window of one axis: start[i], count[i], and weights, fractions of `one`,
// at table[i * stride + k] for k < MaxTaps(in, out) (zero past count).
// REQUIRES: stride >= MaxTaps(in, out).
template <typename Weight>
void BuildAxis(int in, int out, int one, int stride, Weight* table, int* start, int* count) {
  const int taps = MaxTaps(in, out);
  switch (taps) {
    case 1:
      return BuildAxisTaps<1>(in, out, one, taps, stride, table, start, count);
    case 2:
      return BuildAxisTaps<2>(in, out, one, taps, stride, table, start, count);
    case 3:
      return BuildAxisTaps<3>(in, out, one, taps, stride, table, start, count);
    case 4:
      return BuildAxisTaps<4>(in, out, one, taps, stride, table, start, count);
    case 5:
      return BuildAxisTaps<5>(in, out, one, taps, stride, table, start, count);
    case 6:
      return BuildAxisTaps<6>(in, out, one, taps, stride, table, start, count);
    default:
      return BuildAxisTaps<0>(in, out, one, taps, stride, table, start, count);
  }
}

// Vertical weights: output row y is sum_k weights[y * taps + k] * row(start[y] + k), k < count[y].
struct VerticalFilter {
  int in_size = 0, out_size = 0;  // what it was built for; 0 when unbuilt
  int taps = 0;                   // the stride of weights
  std::vector<int> start, count;
  std::vector<uint16_t> weights;

  void Build(int in, int out) {
    taps = MaxTaps(in, out);
    start.resize(out);
    count.resize(out);
    weights.resize(static_cast<size_t>(out) * taps);
    BuildAxis(in, out, kVerticalOne, taps, weights.data(), start.data(), count.data());
    in_size = in;
    out_size = out;
  }
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

  void Build(int in, int out) {
    // Sized for the most taps any output can have (ceil(2 * radius), which some output nearly
    // always reaches).
    const int taps = MaxTaps(in, out);
    groups = (taps + kTapsPerGroup - 1) / kTapsPerGroup;
    pairs = taps <= 2 ? 1 : taps <= 4 ? 2 : kPairsPerGroup * groups;
    const int padded = (out + kPixelsPerStep - 1) / kPixelsPerStep * kPixelsPerStep;
    const int stride = pairs * 2;
    start.resize(padded);
    count.resize(out);
    weights.resize(static_cast<size_t>(padded) * stride);
    // Up to 5 taps, tap t is slot t of the layout; beyond, groups of 5 taps take 6 slots.
    if (taps <= kTapsPerGroup) {
      BuildAxis(in, out, kHorizontalOne, stride, weights.data(), start.data(), count.data());
      // The slot past the taps, if any (there is at most one: 1 tap of 2, 3 of 4, 5 of 6).
      if (stride > taps) {
        for (int x = 0; x < out; ++x) weights[static_cast<size_t>(x) * stride + taps] = 0;
      }
    } else {
      plain.resize(static_cast<size_t>(out) * taps);
      BuildAxis(in, out, kHorizontalOne, taps, plain.data(), start.data(), count.data());
      std::fill_n(weights.begin(), static_cast<size_t>(out) * stride, 0);
      for (int x = 0; x < out; ++x) {
        const int16_t* from = &plain[static_cast<size_t>(x) * taps];
        int16_t* to = &weights[static_cast<size_t>(x) * stride];
        for (int g = 0; g < groups; ++g) {
          const int n = std::min(kTapsPerGroup, taps - g * kTapsPerGroup);
          std::copy_n(from + static_cast<ptrdiff_t>(g) * kTapsPerGroup, n,
                      to + static_cast<ptrdiff_t>(g) * 2 * kPairsPerGroup);
        }
      }
    }
    std::fill(start.begin() + out, start.end(), 0);
    std::fill(weights.begin() + static_cast<ptrdiff_t>(out) * stride, weights.end(), 0);
    in_size = in;
    out_size = out;
  }

  // Bytes the kernels may read past the last source pixel (zero weights there): the last 16-byte
  // load starts at most 15 * (groups - 1) bytes into the last pixel.
  size_t overread() const { return size_t{16} * groups; }
};

// ---- Portable kernels. ----

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

// Filters rows in[0..kRowsPerStep) (each readable f.overread() bytes past its end) into
// out[0..kRowsPerStep), f.out_size pixels each, mirrored when flip is set. Callers with fewer rows
// repeat an input and aim the spare outputs at a junk row.
//
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

// ---- AVX2 kernels: the same arithmetic, 32 bytes or 4 rows at a time. ----

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SLUICE_HAVE_AVX2 1
#define SLUICE_AVX2 __attribute__((target("avx2")))
#define SLUICE_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

// 32 bytes of VerticalPortable's output at j, from kTaps rows when kTaps > 0, else from taps rows.
template <int kTaps>
SLUICE_AVX2_INLINE void VerticalBlock(const uint8_t* const* rows, const __m256i* weights, int taps,
                                      size_t j, __m256i round, uint8_t* out) {
  // Each 16-bit lane holds an even and an odd byte: a shift left moves the even one, and a mask
  // keeps the odd one, in the value << 8 form, without unpacking (shuffles are the scarce port).
  const __m256i high = _mm256_set1_epi16(static_cast<int16_t>(0xFF00));
  __m256i even = round, odd = round;
#pragma GCC unroll 8
  for (int k = 0; k < (kTaps > 0 ? kTaps : taps); ++k) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[k] + j));
    // Keeps the compiler from folding the load into both uses: two loads, mostly unaligned,
    // cost more than the register.
    __asm__("" : "+x"(v));
    even = _mm256_add_epi16(even, _mm256_mulhi_epu16(_mm256_slli_epi16(v, 8), weights[k]));
    odd = _mm256_add_epi16(odd, _mm256_mulhi_epu16(_mm256_and_si256(v, high), weights[k]));
  }
  const __m256i packed = _mm256_or_si256(_mm256_srli_epi16(even, 8), _mm256_and_si256(odd, high));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), packed);
}

// kTaps > 0 fixes the tap count, which keeps row pointers and weights in registers.
template <int kTaps>
SLUICE_AVX2 void VerticalAvx2Taps(const uint8_t* const* in_rows, const uint16_t* w, int taps,
                                  size_t n, uint8_t* out) {
  constexpr int kSlots = kTaps > 0 ? kTaps : kMaxVerticalFastTaps;
  const uint8_t* rows[kSlots];
  __m256i weights[kSlots];
#pragma GCC unroll 8
  for (int k = 0; k < (kTaps > 0 ? kTaps : taps); ++k) {
    rows[k] = in_rows[k];
    weights[k] = _mm256_set1_epi16(static_cast<int16_t>(w[k]));
  }
  const __m256i round = _mm256_set1_epi16(static_cast<int16_t>(128 + taps / 2));
  size_t j = 0;
  for (; j + 64 <= n; j += 64) {
    VerticalBlock<kTaps>(rows, weights, taps, j, round, out);
    VerticalBlock<kTaps>(rows, weights, taps, j + 32, round, out);
  }
  // The last blocks overlap the ones before rather than reading past the row.
  if (j < n) VerticalBlock<kTaps>(rows, weights, taps, std::min(j, n - 32), round, out);
  if (j + 32 < n) VerticalBlock<kTaps>(rows, weights, taps, n - 32, round, out);
}

SLUICE_AVX2 void VerticalAvx2(const uint8_t* const* rows, const uint16_t* w, int taps, size_t n,
                              uint8_t* out) {
  if (taps > kMaxVerticalFastTaps || n < 32) {
    VerticalPortable(rows, w, taps, n, out);
    return;
  }
  switch (taps) {
    case 1:
      return VerticalAvx2Taps<1>(rows, w, taps, n, out);
    case 2:
      return VerticalAvx2Taps<2>(rows, w, taps, n, out);
    case 3:
      return VerticalAvx2Taps<3>(rows, w, taps, n, out);
    case 4:
      return VerticalAvx2Taps<4>(rows, w, taps, n, out);
    case 5:
      return VerticalAvx2Taps<5>(rows, w, taps, n, out);
    case 6:
      return VerticalAvx2Taps<6>(rows, w, taps, n, out);
    case 7:
      return VerticalAvx2Taps<7>(rows, w, taps, n, out);
    case 8:
      return VerticalAvx2Taps<8>(rows, w, taps, n, out);
    default:
      return VerticalAvx2Taps<0>(rows, w, taps, n, out);
  }
}

// ---- AVX-512 (BW) vertical kernel: the AVX2 one, 64 bytes at a time. Even where 512-bit
// operations are split in two (AMD Zen 4) it is ~15% faster: half the instructions. (A 512-bit
// horizontal kernel, 4 rows per register, was slower there.) ----

#define SLUICE_AVX512 __attribute__((target("avx512f,avx512bw")))
#define SLUICE_AVX512_INLINE __attribute__((target("avx512f,avx512bw"), always_inline)) inline

template <int kTaps>
SLUICE_AVX512_INLINE void VerticalBlock512(const uint8_t* const* rows, const __m512i* weights,
                                           int taps, size_t j, __m512i round, uint8_t* out) {
  const __m512i high = _mm512_set1_epi16(static_cast<int16_t>(0xFF00));
  __m512i even = round, odd = round;
#pragma GCC unroll 8
  for (int k = 0; k < (kTaps > 0 ? kTaps : taps); ++k) {
    __m512i v = _mm512_loadu_si512(rows[k] + j);
    __asm__("" : "+v"(v));
    even = _mm512_add_epi16(even, _mm512_mulhi_epu16(_mm512_slli_epi16(v, 8), weights[k]));
    odd = _mm512_add_epi16(odd, _mm512_mulhi_epu16(_mm512_and_si512(v, high), weights[k]));
  }
  _mm512_storeu_si512(out + j,
                      _mm512_or_si512(_mm512_srli_epi16(even, 8), _mm512_and_si512(odd, high)));
}

template <int kTaps>
SLUICE_AVX512 void VerticalAvx512Taps(const uint8_t* const* in_rows, const uint16_t* w, int taps,
                                      size_t n, uint8_t* out) {
  constexpr int kSlots = kTaps > 0 ? kTaps : kMaxVerticalFastTaps;
  const uint8_t* rows[kSlots];
  __m512i weights[kSlots];
#pragma GCC unroll 8
  for (int k = 0; k < (kTaps > 0 ? kTaps : taps); ++k) {
    rows[k] = in_rows[k];
    weights[k] = _mm512_set1_epi16(static_cast<int16_t>(w[k]));
  }
  const __m512i round = _mm512_set1_epi16(static_cast<int16_t>(128 + taps / 2));
  for (size_t j = 0; j < n; j += 64) {
    // The last block overlaps the one before rather than reading past the row.
    VerticalBlock512<kTaps>(rows, weights, taps, std::min(j, n - 64), round, out);
  }
}

SLUICE_AVX512 void VerticalAvx512(const uint8_t* const* rows, const uint16_t* w, int taps, size_t n,
                                  uint8_t* out) {
  if (taps > kMaxVerticalFastTaps || n < 64) {
    VerticalAvx2(rows, w, taps, n, out);
    return;
  }
  switch (taps) {
    case 1:
      return VerticalAvx512Taps<1>(rows, w, taps, n, out);
    case 2:
      return VerticalAvx512Taps<2>(rows, w, taps, n, out);
    case 3:
      return VerticalAvx512Taps<3>(rows, w, taps, n, out);
    case 4:
      return VerticalAvx512Taps<4>(rows, w, taps, n, out);
    case 5:
      return VerticalAvx512Taps<5>(rows, w, taps, n, out);
    case 6:
      return VerticalAvx512Taps<6>(rows, w, taps, n, out);
    case 7:
      return VerticalAvx512Taps<7>(rows, w, taps, n, out);
    case 8:
      return VerticalAvx512Taps<8>(rows, w, taps, n, out);
    default:
      return VerticalAvx512Taps<0>(rows, w, taps, n, out);
  }
}

// 16 bytes at a in the low lane, at b in the high one. A broadcast load and a blend, rather than
// vinserti128, keep the shuffle port free.
SLUICE_AVX2_INLINE __m256i LoadPair(const uint8_t* a, const uint8_t* b) {
  const __m256i low = _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  __m256i high = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  // Otherwise the compiler merges the two back into vinserti128.
  __asm__("" : "+x"(high));
  return _mm256_blend_epi32(low, high, 0xF0);
}

SLUICE_AVX2_INLINE __m256i BroadcastPair(const int16_t* w) {
  int32_t pair;
  std::memcpy(&pair, w, sizeof(pair));
  return _mm256_set1_epi32(pair);
}

// Source bytes into zero-extended 16-bit pairs (tap 2q, tap 2q + 1) for r, g, b, then a zero
// pair: pmaddwd then leaves one pixel's r, g, b and 0 in the four 32-bit lanes of each row.
struct PairShuffles {
  __m256i pair0, pair1, pair2;
};

// Adds output pixel x's sums to *s01 (rows 0 and 1, low and high lane) and *s23 (rows 2 and 3).
template <int kPairs>
SLUICE_AVX2_INLINE void PixelSums(const uint8_t* const* in, const HorizontalFilter& f, int pairs,
                                  int x, const PairShuffles& shuffles, __m256i* s01, __m256i* s23) {
  size_t s = size_t{3} * f.start[x];
  const int16_t* w = f.weights.data() + static_cast<size_t>(x) * pairs * 2;
  for (int p = 0; p < pairs; p += kPairsPerGroup, s += size_t{3} * kTapsPerGroup, w += 6) {
    const __m256i v01 = LoadPair(in[0] + s, in[1] + s);
    const __m256i v23 = LoadPair(in[2] + s, in[3] + s);
    __m256i weight = BroadcastPair(w);
    *s01 =
        _mm256_add_epi32(*s01, _mm256_madd_epi16(_mm256_shuffle_epi8(v01, shuffles.pair0), weight));
    *s23 =
        _mm256_add_epi32(*s23, _mm256_madd_epi16(_mm256_shuffle_epi8(v23, shuffles.pair0), weight));
    if (kPairs == 0 || kPairs >= 2) {
      weight = BroadcastPair(w + 2);
      *s01 = _mm256_add_epi32(*s01,
                              _mm256_madd_epi16(_mm256_shuffle_epi8(v01, shuffles.pair1), weight));
      *s23 = _mm256_add_epi32(*s23,
                              _mm256_madd_epi16(_mm256_shuffle_epi8(v23, shuffles.pair1), weight));
    }
    if (kPairs == 0 || kPairs >= 3) {
      weight = BroadcastPair(w + 4);
      *s01 = _mm256_add_epi32(*s01,
                              _mm256_madd_epi16(_mm256_shuffle_epi8(v01, shuffles.pair2), weight));
      *s23 = _mm256_add_epi32(*s23,
                              _mm256_madd_epi16(_mm256_shuffle_epi8(v23, shuffles.pair2), weight));
    }
  }
}

// Stores 4 pixels of two rows (the low and high lane of bytes, 12 bytes each) at pixel x.
SLUICE_AVX2_INLINE void StoreStep(__m256i bytes, int x, int n, bool flip, uint8_t* out_lo,
                                  uint8_t* out_hi) {
  // A 16-byte store spills 4 junk bytes onto pixels the next step writes; the last steps, where
  // it would leave the row (or pad pixels past the row would land in it), go through a buffer.
  if (x + 6 <= n) {
    const size_t at = flip ? size_t{3} * (n - x - kPixelsPerStep) - 4 : size_t{3} * x;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out_lo + at), _mm256_castsi256_si128(bytes));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out_hi + at), _mm256_extracti128_si256(bytes, 1));
  } else {
    const int valid = std::min(kPixelsPerStep, n - x);
    alignas(32) uint8_t buffer[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(buffer), bytes);
    const size_t length = size_t{3} * valid;
    const size_t from = flip ? 16 - length : 0;
    const size_t at = size_t{3} * (flip ? n - x - valid : x);
    std::memcpy(out_lo + at, buffer + from, length);
    std::memcpy(out_hi + at, buffer + 16 + from, length);
  }
}

// As HorizontalPortable. Rows go in pairs, one per 128-bit lane, so that the pair's weights are
// broadcast once for four rows. kPairs is the filter's pairs when it is 1, 2 or 3 (one load per
// pixel and row), or 0 for any multiple of 3.
template <int kPairs>
SLUICE_AVX2 void HorizontalAvx2(const uint8_t* const* in, uint8_t* const* out,
                                const HorizontalFilter& f, bool flip,
                                std::vector<uint8_t>* /*unused scratch*/) {
  PairShuffles shuffles;
  shuffles.pair0 = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
                                    0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  shuffles.pair1 = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,  //
                                    6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  shuffles.pair2 =
      _mm256_setr_epi8(12, -1, -1, -1, 13, -1, -1, -1, 14, -1, -1, -1, -1, -1, -1, -1,  //
                       12, -1, -1, -1, 13, -1, -1, -1, 14, -1, -1, -1, -1, -1, -1, -1);
  // A pixel's sums doubled hold its r, g and b in bytes 2, 6 and 10 of each lane (the kernel's
  // fixed point is 15 bits). place[i] moves them to pixel i's 3 bytes of a step's 12, which are
  // the low 12 bytes of the lane, or the high 12 in reverse pixel order when flipping.
  __m256i place[kPixelsPerStep];
  for (int i = 0; i < kPixelsPerStep; ++i) {
    alignas(32) int8_t control[32];
    std::memset(control, -1, sizeof(control));
    const int at = flip ? 4 + 3 * (kPixelsPerStep - 1 - i) : 3 * i;
    for (int c = 0; c < 3; ++c)
      control[at + c] = control[16 + at + c] = static_cast<int8_t>(4 * c + 2);
    place[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(control));
  }
  const __m256i round = _mm256_set1_epi32(kHorizontalOne / 2);
  const int n = f.out_size;
  const int pairs = kPairs > 0 ? kPairs : f.pairs;
  for (int x = 0; x < n; x += kPixelsPerStep) {
    __m256i bytes01 = _mm256_setzero_si256(), bytes23 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int i = 0; i < kPixelsPerStep; ++i) {
      __m256i s01 = round, s23 = round;
      PixelSums<kPairs>(in, f, pairs, x + i, shuffles, &s01, &s23);
      bytes01 = _mm256_or_si256(bytes01, _mm256_shuffle_epi8(_mm256_add_epi32(s01, s01), place[i]));
      bytes23 = _mm256_or_si256(bytes23, _mm256_shuffle_epi8(_mm256_add_epi32(s23, s23), place[i]));
    }
    StoreStep(bytes01, x, n, flip, out[0], out[1]);
    StoreStep(bytes23, x, n, flip, out[2], out[3]);
  }
}

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
bool CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}
#else
#define SLUICE_HAVE_AVX2 0
bool CpuHasAvx2() { return false; }
bool CpuHasAvx512() { return false; }
#endif

using VerticalKernel = void (*)(const uint8_t* const*, const uint16_t*, int, size_t, uint8_t*);
using HorizontalKernel = void (*)(const uint8_t* const*, uint8_t* const*, const HorizontalFilter&,
                                  bool, std::vector<uint8_t>*);

// Writes width RGB pixels of `from` into `to` in reverse order. REQUIRES: they do not overlap.
void ReverseRow(const uint8_t* from, int width, uint8_t* to) {
  const uint8_t* p = from + size_t{3} * (width - 1);
  for (int x = 0; x < width; ++x, p -= 3, to += 3) {
    to[0] = p[0];
    to[1] = p[1];
    to[2] = p[2];
  }
}

// Relative costs that steer which pass runs first when both are needed, per byte-tap of the
// vertical kernel against one output pixel and tap pair of the horizontal kernel. Fitted on AVX2
// timings (vertical first wins when shrinking, horizontal first when enlarging; near the
// crossover the two differ by a few percent).
constexpr double kVerticalCostPerByteTap = 0.09;
constexpr double kVerticalCostPerByte = 0.03;
constexpr double kHorizontalCostPerPair = 1.0;
constexpr double kHorizontalCostPerPixel = 1.2;
constexpr double kCopyCostPerByte = 0.02;

}  // namespace

struct Resizer::State {
  bool simd = false;
  const char* name = "portable";
  VerticalKernel vertical = VerticalPortable;
  VerticalFilter fy;
  HorizontalFilter fx;
  // kRowsPerStep horizontal inputs, each padded for the kernels' overreads; a junk output row for
  // the spare rows of a step; the rows filtered horizontally first.
  std::vector<uint8_t> inputs, junk, rows;
  std::vector<uint8_t> tile;         // the portable horizontal kernel's
  std::vector<const uint8_t*> taps;  // row pointers of one vertical window
};

Resizer::Resizer(Kernels kernels) : state_(std::make_unique<State>()) {
#if SLUICE_HAVE_AVX2
  if (kernels != Kernels::kPortable && CpuHasAvx2()) {
    state_->simd = true;
    state_->vertical = VerticalAvx2;
    state_->name = "avx2";
    if (kernels == Kernels::kBest && CpuHasAvx512()) {
      state_->vertical = VerticalAvx512;
      state_->name = "avx512";
    }
  }
#else
  (void)kernels;
#endif
}
Resizer::~Resizer() = default;
Resizer::Resizer(Resizer&&) noexcept = default;
Resizer& Resizer::operator=(Resizer&&) noexcept = default;

std::string_view Resizer::kernels_name() const { return state_->name; }

void Resizer::Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height,
                     size_t dst_stride, bool flip_horizontal) {
  if (dst_width <= 0 || dst_height <= 0 || src.width <= 0 || src.height <= 0) return;
  State& s = *state_;
  const int sw = src.width, sh = src.height, dw = dst_width, dh = dst_height;
  const bool flip = flip_horizontal;
  const size_t dst_row_bytes = size_t{3} * dw;
  auto dst_row = [dst, dst_stride](int y) { return dst + static_cast<size_t>(y) * dst_stride; };
  const bool horizontal = sw != dw;
  const bool vertical = sh != dh;

  if (!horizontal && !vertical) {
    for (int y = 0; y < sh; ++y) {
      if (flip) {
        ReverseRow(src.row(y), sw, dst_row(y));
      } else {
        std::memcpy(dst_row(y), src.row(y), dst_row_bytes);
      }
    }
    return;
  }

  if (vertical && (s.fy.in_size != sh || s.fy.out_size != dh)) s.fy.Build(sh, dh);
  if (horizontal && (s.fx.in_size != sw || s.fx.out_size != dw)) {
    s.fx.Build(sw, dw);
  }
  const VerticalFilter& fy = s.fy;
  const HorizontalFilter& fx = s.fx;
  // Runs the vertical filter of output row y over rows row(fy.start[y] + k), into out.
  auto run_vertical = [&s, &fy](int y, auto row, size_t n, uint8_t* out) {
    const int count = fy.count[y];
    s.taps.resize(count);
    for (int k = 0; k < count; ++k) s.taps[k] = row(fy.start[y] + k);
    s.vertical(s.taps.data(), &fy.weights[static_cast<size_t>(y) * fy.taps], count, n, out);
  };
  auto src_row = [&src](int y) { return src.row(y); };

  if (!horizontal) {
    if (flip && s.junk.size() < dst_row_bytes) s.junk.resize(dst_row_bytes);
    for (int y = 0; y < dh; ++y) {
      if (!flip) {
        run_vertical(y, src_row, dst_row_bytes, dst_row(y));
      } else {
        run_vertical(y, src_row, dst_row_bytes, s.junk.data());
        ReverseRow(s.junk.data(), dw, dst_row(y));
      }
    }
    return;
  }

  HorizontalKernel run_horizontal = HorizontalPortable;
#if SLUICE_HAVE_AVX2
  if (s.simd) {
    switch (fx.pairs) {
      case 1:
        run_horizontal = HorizontalAvx2<1>;
        break;
      case 2:
        run_horizontal = HorizontalAvx2<2>;
        break;
      case 3:
        run_horizontal = HorizontalAvx2<3>;
        break;
      default:
        run_horizontal = HorizontalAvx2<0>;
        break;
    }
  }
#endif
  const size_t in_bytes = size_t{3} * sw;
  const size_t in_stride = in_bytes + fx.overread();
  // resize() keeps old contents: the padding only ever holds bytes, which meet zero weights.
  if (s.inputs.size() < kRowsPerStep * in_stride) s.inputs.resize(kRowsPerStep * in_stride);
  if (s.junk.size() < dst_row_bytes) s.junk.resize(dst_row_bytes);
  auto input = [&s, in_stride](int r) { return &s.inputs[r * in_stride]; };
  const uint8_t* in[kRowsPerStep];
  uint8_t* out[kRowsPerStep];
  // Filters horizontally source rows [first, last) into out_row(y), a step at a time.
  auto horizontal_pass = [&](int first, int last, auto out_row) {
    for (int y0 = first; y0 < last; y0 += kRowsPerStep) {
      const int count = std::min(kRowsPerStep, last - y0);
      for (int r = 0; r < kRowsPerStep; ++r) {
        if (r < count) std::memcpy(input(r), src.row(y0 + r), in_bytes);
        in[r] = input(r < count ? r : 0);
        out[r] = r < count ? out_row(y0 + r) : s.junk.data();
      }
      run_horizontal(in, out, fx, flip, &s.tile);
    }
  };

  if (!vertical) {
    horizontal_pass(0, sh, dst_row);
    return;
  }

  // Both passes. Vertical first filters dst_height source-wide rows, then those rows
  // horizontally; horizontal first filters every source row a vertical window reaches, then
  // dst_height rows dst_width wide vertically.
  int first_row = sh, last_row = 0;  // the source rows the vertical windows reach
  for (int y = 0; y < dh; ++y) {
    first_row = std::min(first_row, fy.start[y]);
    last_row = std::max(last_row, fy.start[y] + fy.count[y]);
  }
  const double average_taps = std::min<double>(fy.taps, std::max(2.0, 2.0 * sh / dh));
  auto vertical_cost = [average_taps](double bytes) {
    return bytes * (kVerticalCostPerByteTap * average_taps + kVerticalCostPerByte);
  };
  const double horizontal_cost_per_row =
      dw * (kHorizontalCostPerPixel + kHorizontalCostPerPair * fx.pairs);
  const double v_first = dh * (vertical_cost(3.0 * sw) + horizontal_cost_per_row);
  const double h_first =
      (last_row - first_row) * (horizontal_cost_per_row + kCopyCostPerByte * 3.0 * sw) +
      dh * vertical_cost(3.0 * dw);
  if (v_first <= h_first) {
    // The vertical pass writes straight into the padded horizontal inputs.
    for (int y0 = 0; y0 < dh; y0 += kRowsPerStep) {
      const int count = std::min(kRowsPerStep, dh - y0);
      for (int r = 0; r < kRowsPerStep; ++r) {
        if (r < count) run_vertical(y0 + r, src_row, in_bytes, input(r));
        in[r] = input(r < count ? r : 0);
        out[r] = r < count ? dst_row(y0 + r) : s.junk.data();
      }
      run_horizontal(in, out, fx, flip, &s.tile);
    }
    return;
  }
  s.rows.resize(static_cast<size_t>(last_row - first_row) * dst_row_bytes);
  auto row_of_rows = [&s, first_row, dst_row_bytes](int y) {
    return &s.rows[static_cast<size_t>(y - first_row) * dst_row_bytes];
  };
  horizontal_pass(first_row, last_row, row_of_rows);
  for (int y = 0; y < dh; ++y) run_vertical(y, row_of_rows, dst_row_bytes, dst_row(y));
}

void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
            bool flip_horizontal) {
  thread_local Resizer resizer;
  resizer.Resize(src, dst, dst_width, dst_height, dst_stride, flip_horizontal);
}

void FlipHorizontal(uint8_t* data, int width, int height, size_t stride) {
  if (width < 2) return;
  // Each row is copied aside, then written back in reverse with one 4-byte load and store per
  // pixel (a third of the memory operations of byte swaps). A store's fourth byte lands on the
  // next pixel, which is written next; the last pixel is stored with 3 bytes to stay in the row,
  // and the copy has a byte of slack for the 4-byte load of its last pixel.
  thread_local std::vector<uint8_t> copy;
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  copy.resize(row_bytes + 1);
  for (int y = 0; y < height; ++y) {
    uint8_t* row = data + y * stride;
    std::memcpy(copy.data(), row, row_bytes);
    const uint8_t* from = copy.data() + row_bytes - 3;
    uint8_t* to = row;
    for (int x = 0; x + 1 < width; ++x, from -= 3, to += 3) {
      std::memcpy(to, from, 4);
    }
    std::memcpy(to, from, 3);
  }
}

void GrayToRgb(const uint8_t* gray, size_t n_pixels, uint8_t* rgb) {
  for (size_t i = 0; i < n_pixels; ++i) {
    rgb[3 * i] = gray[i];
    rgb[3 * i + 1] = gray[i];
    rgb[3 * i + 2] = gray[i];
  }
}

namespace {
// round(v / 255) for v in 0..255*255, exactly.
inline uint8_t Div255(int v) {
  v += 128;
  return static_cast<uint8_t>((v + (v >> 8)) >> 8);
}
}  // namespace

void CmykToRgb(const uint8_t* cmyk, size_t n_pixels, bool inverted, uint8_t* rgb) {
  if (inverted) {
    // Values are already "amount of no ink": R = C' * K' / 255.
    for (size_t i = 0; i < n_pixels; ++i) {
      const int k = cmyk[4 * i + 3];
      rgb[3 * i] = Div255(cmyk[4 * i] * k);
      rgb[3 * i + 1] = Div255(cmyk[4 * i + 1] * k);
      rgb[3 * i + 2] = Div255(cmyk[4 * i + 2] * k);
    }
  } else {
    for (size_t i = 0; i < n_pixels; ++i) {
      const int k = 255 - cmyk[4 * i + 3];
      rgb[3 * i] = Div255((255 - cmyk[4 * i]) * k);
      rgb[3 * i + 1] = Div255((255 - cmyk[4 * i + 1]) * k);
      rgb[3 * i + 2] = Div255((255 - cmyk[4 * i + 2]) * k);
    }
  }
}

}  // namespace sluice

// The x86 kernels: the portable kernels' arithmetic, 32 or 64 bytes (or 4 rows) at a time. They
// are compiled for AVX2 / AVX-512 by function attribute and chosen at run time, so one binary runs
// on any x86-64.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/resize_float_kernels.h"
#include "formats/resize_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SLUICE_HAVE_X86_KERNELS 1
#else
#define SLUICE_HAVE_X86_KERNELS 0
#endif

namespace sluice::resize_internal {

#if SLUICE_HAVE_X86_KERNELS
namespace {

// ---- AVX2 kernels: the same arithmetic, 32 bytes or 4 rows at a time. ----

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

// The float kernels, 8 floats per operation instead of 4. Not FMA: it would round differently
// from the portable build.
SLUICE_AVX2 void VerticalFloatAvx2(const uint8_t* const* rows, const float* w, int taps, size_t n,
                                   float* out) {
  VerticalFloatBody(rows, w, taps, n, out);
}

SLUICE_AVX2 void HorizontalFloatAvx2(const float* const* in, uint8_t* const* out,
                                     const FloatFilter& f, bool flip, std::vector<float>* tile) {
  HorizontalFloatBody(in, out, f, flip, tile);
}

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
bool CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

}  // namespace

VerticalKernel VerticalAvx2Kernel() { return CpuHasAvx2() ? VerticalAvx2 : nullptr; }
VerticalKernel VerticalAvx512Kernel() { return CpuHasAvx512() ? VerticalAvx512 : nullptr; }

HorizontalKernel HorizontalAvx2Kernel(int pairs) {
  if (!CpuHasAvx2()) return nullptr;
  switch (pairs) {
    case 1:
      return HorizontalAvx2<1>;
    case 2:
      return HorizontalAvx2<2>;
    case 3:
      return HorizontalAvx2<3>;
    default:
      return HorizontalAvx2<0>;
  }
}

VerticalFloatKernel VerticalFloatAvx2Kernel() { return CpuHasAvx2() ? VerticalFloatAvx2 : nullptr; }
HorizontalFloatKernel HorizontalFloatAvx2Kernel() {
  return CpuHasAvx2() ? HorizontalFloatAvx2 : nullptr;
}

#else

VerticalFloatKernel VerticalFloatAvx2Kernel() { return nullptr; }
HorizontalFloatKernel HorizontalFloatAvx2Kernel() { return nullptr; }
VerticalKernel VerticalAvx2Kernel() { return nullptr; }
VerticalKernel VerticalAvx512Kernel() { return nullptr; }
HorizontalKernel HorizontalAvx2Kernel(int /*pairs*/) { return nullptr; }

#endif

}  // namespace sluice::resize_internal

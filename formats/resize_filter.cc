#include "formats/resize_filter.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace sluice::resize_internal {
namespace {

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

// The float path's filters, as Pillow (libImaging/Resample.c) and torch (_upsample_*_aa) define
// them, with their half-widths at scale 1.
double Triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}
// Half-open on the left, as Pillow's: a source pixel exactly between two outputs goes to one.
double Box(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }
// Keys' cubic convolution with a = -0.5 (Pillow's BICUBIC, torch's antialiased bicubic).
double Cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

}  // namespace

void FloatFilter::Build(ResizeFilter f, int in, int out) {
  filter = f;
  in_size = in;
  out_size = out;
  start.resize(out);
  count.resize(out);
  if (in == out) {
    taps = 1;
    weights.assign(out, 1.0f);
    for (int i = 0; i < out; ++i) start[i] = i;
    std::fill(count.begin(), count.end(), 1);
    return;
  }
  double (*kernel)(double) = Triangle;
  double half_width = 1.0;
  if (f == ResizeFilter::kArea) {
    kernel = Box;
    half_width = 0.5;
  } else if (f == ResizeFilter::kBicubic) {
    kernel = Cubic;
    half_width = 2.0;
  }
  const double scale = static_cast<double>(in) / out;
  const double stretch = std::max(scale, 1.0);
  const double support = half_width * stretch;
  // Pillow's bound on a window: the filter's support on both sides, and the pixel it straddles.
  taps = std::min(static_cast<int>(std::ceil(support)) * 2 + 1, in);
  weights.assign(static_cast<size_t>(out) * taps, 0.0f);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    // Truncated, not floored, as both references do (the max makes them agree below zero).
    const int first = std::max(static_cast<int>(center - support + 0.5), 0);
    const int end = std::min({static_cast<int>(center + support + 0.5), in, first + taps});
    float* w = &weights[static_cast<size_t>(i) * taps];
    double sum = 0;
    for (int k = 0; k < end - first; ++k) sum += kernel((k + first - center + 0.5) / stretch);
    if (sum == 0) {  // cannot happen for these filters and windows; the nearest pixel if it did
      start[i] = std::clamp(static_cast<int>(center), 0, in - 1);
      count[i] = 1;
      w[0] = 1.0f;
      continue;
    }
    for (int k = 0; k < end - first; ++k) {
      w[k] = static_cast<float>(kernel((k + first - center + 0.5) / stretch) / sum);
    }
    start[i] = first;
    count[i] = end - first;
  }
}

void VerticalFilter::Build(int in, int out) {
  taps = MaxTaps(in, out);
  start.resize(out);
  count.resize(out);
  weights.resize(static_cast<size_t>(out) * taps);
  BuildAxis(in, out, kVerticalOne, taps, weights.data(), start.data(), count.data());
  in_size = in;
  out_size = out;
}

void HorizontalFilter::Build(int in, int out) {
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

}  // namespace sluice::resize_internal

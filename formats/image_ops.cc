#include "formats/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sluice {
namespace {

// Fixed point. A weight is a fraction of 65536 (uint16; a lone weight of 1.0 is stored as 65535),
// and every output's weights are non-negative and sum to exactly 65536. Samples run through the
// kernel as (value << 8), and each product keeps its high 16 bits, value * weight / 256: an
// accumulator then holds the output in 1/256 units and cannot exceed 255 * 256 plus the rounding
// term, so it fits uint16 and no clamping is needed. That is one pmulhuw and one paddw per 8
// samples, which gcc -O2 emits from the plain loops below.
//
// Truncating each product loses under 1/256 per tap; the rounding term adds back taps/2 on average,
// so a constant image stays exactly constant and outputs are within a hair of exact rounding. Past
// kMaxFastTaps (extreme shrinking) the losses would add up, and an exact 32-bit path takes over.
constexpr int kWeightOne = 1 << 16;
constexpr int kMaxFastTaps = 64;

// The kernels are built twice, for AVX2 and for baseline x86-64, and the loader picks one for the
// CPU at hand (an ifunc): AVX2 doubles the lanes of the same loops.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && defined(__GLIBC__)
#define SLUICE_KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SLUICE_KERNEL_CLONES
#endif

// Resampling weights along one axis: output i reads taps consecutive samples from start[i].
struct AxisFilter {
  int taps = 0;
  std::vector<int> start;
  std::vector<uint16_t> weights;  // out_size x taps, zero where an output's window is narrower
  std::vector<int> window_end;    // scratch
  std::vector<double> raw;        // scratch
};

// Triangle filter with pixel centres aligned: output i sits at source coordinate
// (i + 0.5) * scale - 0.5. When shrinking, the triangle is stretched by the scale, so each output
// averages the whole source area it covers (Pillow's BILINEAR). Windows cut by an image edge are
// renormalised.
void BuildFilter(int in_size, int out_size, AxisFilter* f) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double inv_filter_scale = 1.0 / filter_scale;
  // Source pixel x (centre x + 0.5) has a non-zero weight for output i when it lies strictly
  // within filter_scale of the output's centre: the window [lo, hi) below, cut by the image.
  f->start.resize(out_size);
  f->window_end.resize(out_size);
  int taps = 1;
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo =
        std::clamp(static_cast<int>(std::floor(center - filter_scale - 0.5)) + 1, 0, in_size - 1);
    const int hi =
        std::clamp(static_cast<int>(std::ceil(center + filter_scale - 0.5)), lo + 1, in_size);
    f->start[i] = lo;
    f->window_end[i] = hi;
    taps = std::max(taps, hi - lo);
  }
  f->taps = taps;
  f->weights.assign(static_cast<size_t>(out_size) * taps, 0);
  f->raw.resize(taps);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = f->start[i], n = f->window_end[i] - lo;
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const double d = std::abs(lo + k + 0.5 - center) * inv_filter_scale;
      f->raw[k] = d < 1 ? 1 - d : 0;
      total += f->raw[k];
    }
    // Windows at the far edge shift left so that all taps stay inside the image.
    const int start = std::min(lo, in_size - taps);
    uint16_t* q = &f->weights[static_cast<size_t>(i) * taps + (lo - start)];
    // Quantise the running sum, so the weights are non-negative and add up to exactly kWeightOne
    // however many taps share the rounding error.
    const double to_fixed = kWeightOne / total;
    double cumulative = 0;
    int previous = 0;
    for (int k = 0; k < n; ++k) {
      cumulative += f->raw[k];
      // Non-negative, so adding 0.5 and truncating rounds, without a libm call per tap.
      // NOLINTNEXTLINE(bugprone-incorrect-roundings)
      const int next = static_cast<int>(cumulative * to_fixed + 0.5);
      q[k] = static_cast<uint16_t>(std::min(next - previous, kWeightOne - 1));
      previous = next;
    }
    f->start[i] = start;
  }
}

// The kernel of both passes: out[j] = sum_k w[k] * in[k * stride + j] for j < n, bytes in and out.
// The vertical pass runs it along rows; the horizontal pass along columns of a transposed tile.

// kBlock outputs at a time: a fixed trip count is what lets gcc -O2 vectorize the inner loops.
template <int kBlock>
inline void FilterBlock(const uint8_t* in, size_t stride, const uint16_t* w, int taps,
                        uint8_t* out) {
  uint16_t acc[kBlock];
  const uint16_t round = static_cast<uint16_t>(128 + taps / 2);
  for (int j = 0; j < kBlock; ++j) acc[j] = round;
  for (int k = 0; k < taps; ++k, in += stride) {
    const uint32_t wk = w[k];
    for (int j = 0; j < kBlock; ++j) {
      acc[j] += static_cast<uint16_t>((static_cast<uint32_t>(in[j] << 8) * wk) >> 16);
    }
  }
  for (int j = 0; j < kBlock; ++j) out[j] = static_cast<uint8_t>(acc[j] >> 8);
}

uint8_t FilterOneExact(const uint8_t* in, size_t stride, const uint16_t* w, int taps) {
  uint32_t acc = kWeightOne / 2;
  for (int k = 0; k < taps; ++k, in += stride) acc += in[0] * static_cast<uint32_t>(w[k]);
  return static_cast<uint8_t>(acc >> 16);
}

SLUICE_KERNEL_CLONES void FilterLine(const uint8_t* in, size_t stride, const uint16_t* w, int taps,
                                     int n, uint8_t* out) {
  int j = 0;
  if (taps <= kMaxFastTaps) {
    constexpr int kBlock = 32;
    for (; j + kBlock <= n; j += kBlock) FilterBlock<kBlock>(in + j, stride, w, taps, out + j);
    for (; j < n; ++j) FilterBlock<1>(in + j, stride, w, taps, out + j);
  }
  for (; j < n; ++j) out[j] = FilterOneExact(in + j, stride, w, taps);
}

// The horizontal pass works on kTileRows rows at a time, transposed so that each source column
// is kTileRows pixels of 4 bytes (RGB plus one spare) in a row: an output column is then
// FilterBlock over 64 contiguous bytes, vectorized like the vertical pass. Moving 4-byte pixels in
// and out of the tile costs a load and a store each.
constexpr int kTileRows = 16;
constexpr size_t kTileColumn = size_t{kTileRows} * 4;
// Columns moved per chunk of a transpose: 64 columns of a tile are 4 KiB.
constexpr size_t kChunk = 64;

// Per-thread scratch, grown to the largest request and reused, so a steady stream of resizes does
// not allocate.
struct Scratch {
  AxisFilter fx, fy;
  std::vector<uint8_t> tile_in, tile_out;
  std::vector<uint8_t> rows;       // intermediate rows
  std::vector<uint8_t> spare_row;  // where a partial tile's missing rows are written
};

inline void Copy4(uint8_t* dst, const uint8_t* src) { std::memcpy(dst, src, 4); }
inline void Copy3(uint8_t* dst, const uint8_t* src) { std::memcpy(dst, src, 3); }

// Resamples rows in[0..count) (width_in RGB pixels each) horizontally into out[0..count).
// REQUIRES: 0 < count <= kTileRows.
SLUICE_KERNEL_CLONES void HorizontalTile(const uint8_t* const* in, uint8_t* const* out, int count,
                                         int width_in, int width_out, Scratch* s) {
  // Full tiles always: missing input rows repeat the last one, and their outputs go to a spare
  // row. The fixed trip count lets the copy loops unroll.
  const uint8_t* in_rows[kTileRows];
  uint8_t* out_rows[kTileRows];
  s->spare_row.resize(static_cast<size_t>(width_out) * 3);
  for (int r = 0; r < kTileRows; ++r) {
    in_rows[r] = in[std::min(r, count - 1)];
    out_rows[r] = r < count ? out[r] : s->spare_row.data();
  }
  // Chunks of columns small enough to stay in L1 while each row is copied in as one stream.
  uint8_t* tile = s->tile_in.data();
  // The last pixel gets a 3-byte load so as not to leave the row.
  const size_t last_in = static_cast<size_t>(width_in) - 1;
  for (size_t x0 = 0; x0 < last_in; x0 += kChunk) {
    const size_t x1 = std::min(x0 + kChunk, last_in);
    for (int r = 0; r < kTileRows; ++r) {
      const uint8_t* from = in_rows[r] + 3 * x0;
      uint8_t* to = tile + x0 * kTileColumn + size_t{4} * r;
      for (size_t x = x0; x < x1; ++x, from += 3, to += kTileColumn) Copy4(to, from);
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    Copy3(tile + last_in * kTileColumn + size_t{4} * r, in_rows[r] + 3 * last_in);
  }

  const AxisFilter& f = s->fx;
  const int taps = f.taps;
  const bool fast = taps <= kMaxFastTaps;
  for (int x = 0; x < width_out; ++x) {
    const uint8_t* src = s->tile_in.data() + static_cast<size_t>(f.start[x]) * kTileColumn;
    const uint16_t* w = &f.weights[static_cast<size_t>(x) * taps];
    uint8_t* dst = s->tile_out.data() + static_cast<size_t>(x) * kTileColumn;
    if (fast) {
      FilterBlock<kTileColumn>(src, kTileColumn, w, taps, dst);
    } else {
      FilterLine(src, kTileColumn, w, taps, kTileColumn, dst);
    }
  }

  // Each 4-byte store spills one byte into the next pixel, which that pixel then overwrites; the
  // last pixel is stored with 3 so nothing past the row is touched.
  const uint8_t* tile_out = s->tile_out.data();
  const size_t last_out = static_cast<size_t>(width_out) - 1;
  for (size_t x0 = 0; x0 < last_out; x0 += kChunk) {
    const size_t x1 = std::min(x0 + kChunk, last_out);
    for (int r = 0; r < kTileRows; ++r) {
      const uint8_t* from = tile_out + x0 * kTileColumn + size_t{4} * r;
      uint8_t* to = out_rows[r] + 3 * x0;
      for (size_t x = x0; x < x1; ++x, from += kTileColumn, to += 3) Copy4(to, from);
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    Copy3(out_rows[r] + 3 * last_out, tile_out + last_out * kTileColumn + size_t{4} * r);
  }
}

// Relative cost of moving one pixel into or out of a tile, against one byte-tap of the kernel;
// measured, it only steers which pass runs first.
constexpr double kTransposeCost = 4.0;

}  // namespace

void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride) {
  if (dst_width <= 0 || dst_height <= 0 || src.width <= 0 || src.height <= 0) return;
  const int sw = src.width, sh = src.height;
  const size_t dst_row_bytes = static_cast<size_t>(dst_width) * 3;
  if (sw == dst_width && sh == dst_height) {
    for (int y = 0; y < sh; ++y) std::memcpy(dst + y * dst_stride, src.row(y), dst_row_bytes);
    return;
  }
  thread_local Scratch s;
  const bool horizontal = sw != dst_width;
  const bool vertical = sh != dst_height;
  if (horizontal) {
    BuildFilter(sw, dst_width, &s.fx);
    s.tile_in.resize(static_cast<size_t>(sw) * kTileColumn);
    s.tile_out.resize(static_cast<size_t>(dst_width) * kTileColumn);
  }
  if (vertical) BuildFilter(sh, dst_height, &s.fy);
  const uint8_t* in_rows[kTileRows];
  uint8_t* out_rows[kTileRows];

  if (!vertical) {
    for (int y0 = 0; y0 < sh; y0 += kTileRows) {
      const int count = std::min(kTileRows, sh - y0);
      for (int r = 0; r < count; ++r) {
        in_rows[r] = src.row(y0 + r);
        out_rows[r] = dst + (y0 + r) * dst_stride;
      }
      HorizontalTile(in_rows, out_rows, count, sw, dst_width, &s);
    }
    return;
  }
  const AxisFilter& fy = s.fy;
  const int ty = fy.taps;
  auto vertical_weights = [&fy, ty](int y) { return &fy.weights[static_cast<size_t>(y) * ty]; };
  if (!horizontal) {
    for (int y = 0; y < dst_height; ++y) {
      FilterLine(src.row(fy.start[y]), src.stride, vertical_weights(y), ty,
                 static_cast<int>(dst_row_bytes), dst + y * dst_stride);
    }
    return;
  }

  // Both passes. Vertical first leaves dst_height rows to transpose and filter horizontally;
  // horizontal first does that to every source row a vertical window reaches, but then filters
  // vertically over narrower rows.
  const int first_row = fy.start[0];
  const int last_row = fy.start[dst_height - 1] + ty;  // exclusive
  const double tx = s.fx.taps;
  const double h_pass_per_row = kTransposeCost * (sw + dst_width) + 4.0 * dst_width * tx;
  const double v_first = dst_height * (3.0 * sw * ty + h_pass_per_row);
  const double h_first =
      (last_row - first_row) * h_pass_per_row + dst_height * 3.0 * dst_width * ty;
  if (v_first <= h_first) {
    const size_t row_bytes = static_cast<size_t>(sw) * 3;
    s.rows.resize(kTileRows * row_bytes);
    for (int y0 = 0; y0 < dst_height; y0 += kTileRows) {
      const int count = std::min(kTileRows, dst_height - y0);
      for (int r = 0; r < count; ++r) {
        uint8_t* row = &s.rows[r * row_bytes];
        FilterLine(src.row(fy.start[y0 + r]), src.stride, vertical_weights(y0 + r), ty,
                   static_cast<int>(row_bytes), row);
        in_rows[r] = row;
        out_rows[r] = dst + (y0 + r) * dst_stride;
      }
      HorizontalTile(in_rows, out_rows, count, sw, dst_width, &s);
    }
    return;
  }
  // Horizontal first, into rows first_row..last_row of an intermediate image dst_width wide.
  s.rows.resize((last_row - first_row) * dst_row_bytes);
  for (int y0 = first_row; y0 < last_row; y0 += kTileRows) {
    const int count = std::min(kTileRows, last_row - y0);
    for (int r = 0; r < count; ++r) {
      in_rows[r] = src.row(y0 + r);
      out_rows[r] = &s.rows[(y0 + r - first_row) * dst_row_bytes];
    }
    HorizontalTile(in_rows, out_rows, count, sw, dst_width, &s);
  }
  for (int y = 0; y < dst_height; ++y) {
    FilterLine(&s.rows[(fy.start[y] - first_row) * dst_row_bytes], dst_row_bytes,
               vertical_weights(y), ty, static_cast<int>(dst_row_bytes), dst + y * dst_stride);
  }
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
    for (int x = 0; x + 1 < width; ++x, from -= 3, to += 3) Copy4(to, from);
    Copy3(to, from);
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

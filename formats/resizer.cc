// Resizer: which passes run, in which order, over which rows; the filters (resize_filter.h) and
// the row kernels (resize_kernels.h) do the arithmetic.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "formats/image_ops.h"
#include "formats/resize_filter.h"
#include "formats/resize_kernels.h"

namespace sluice {
namespace {

using resize_internal::FloatFilter;
using resize_internal::HorizontalFilter;
using resize_internal::HorizontalKernel;
using resize_internal::kRowsPerStep;
using resize_internal::VerticalFilter;
using resize_internal::VerticalKernel;

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

// Where a resize writes: width x height RGB pixels at data, rows stride bytes apart; row y of the
// result goes to row height - 1 - y when flip_vertical (which every pass gets for free by writing
// through row()).
struct Destination {
  uint8_t* data;
  int width;
  int height;
  size_t stride;
  bool flip_vertical;

  uint8_t* row(int y) const {
    return data + static_cast<size_t>(flip_vertical ? height - 1 - y : y) * stride;
  }
  size_t row_bytes() const { return size_t{3} * width; }
};

}  // namespace

struct Resizer::State {
  bool simd = false;
  const char* name = "portable";
  VerticalKernel vertical = resize_internal::VerticalPortable;
  resize_internal::VerticalFloatKernel vertical_float = resize_internal::VerticalFloat;
  resize_internal::HorizontalFloatKernel horizontal_float = resize_internal::HorizontalFloat;
  VerticalFilter fy;
  HorizontalFilter fx;
  // kRowsPerStep horizontal inputs, each padded for the kernels' overreads (in_stride bytes
  // apart, set per call); a junk output row for the spare rows of a step; the rows filtered
  // horizontally first.
  std::vector<uint8_t> inputs, junk, rows;
  size_t in_stride = 0;
  std::vector<uint8_t> tile;         // the portable horizontal kernel's
  std::vector<const uint8_t*> taps;  // row pointers of one vertical window
  // The float path (area, bicubic): its filters, kRowsPerStep vertically filtered source-wide
  // rows, and its horizontal kernel's tile.
  FloatFilter float_y, float_x;
  std::vector<float> float_rows, float_tile;

  uint8_t* input(int r) { return &inputs[r * in_stride]; }

  // Runs the vertical filter of output row y over rows row(fy.start[y] + k), into out.
  template <typename RowOf>
  void RunVertical(int y, RowOf row, size_t n, uint8_t* out) {
    const int count = fy.count[y];
    taps.resize(count);
    for (int k = 0; k < count; ++k) taps[k] = row(fy.start[y] + k);
    vertical(taps.data(), &fy.weights[static_cast<size_t>(y) * fy.taps], count, n, out);
  }

  // Filters horizontally source rows [first, last) of src into out_row(y), a step at a time.
  template <typename RowOf>
  void HorizontalPass(const ImageView& src, int first, int last, RowOf out_row,
                      HorizontalKernel kernel, bool flip) {
    const size_t in_bytes = size_t{3} * src.width;
    const uint8_t* in[kRowsPerStep];
    uint8_t* out[kRowsPerStep];
    for (int y0 = first; y0 < last; y0 += kRowsPerStep) {
      const int count = std::min(kRowsPerStep, last - y0);
      for (int r = 0; r < kRowsPerStep; ++r) {
        if (r < count) std::memcpy(input(r), src.row(y0 + r), in_bytes);
        in[r] = input(r < count ? r : 0);
        out[r] = r < count ? out_row(y0 + r) : junk.data();
      }
      kernel(in, out, fx, flip, &tile);
    }
  }

  void Copy(const ImageView& src, const Destination& dst, bool flip);
  void VerticalOnly(const ImageView& src, const Destination& dst, bool flip);
  void BothPasses(const ImageView& src, const Destination& dst, HorizontalKernel kernel, bool flip);
  void FloatPasses(const ImageView& src, const Destination& dst, bool flip);
};

void Resizer::State::Copy(const ImageView& src, const Destination& dst, bool flip) {
  for (int y = 0; y < src.height; ++y) {
    if (flip) {
      ReverseRow(src.row(y), src.width, dst.row(y));
    } else {
      std::memcpy(dst.row(y), src.row(y), dst.row_bytes());
    }
  }
}

void Resizer::State::VerticalOnly(const ImageView& src, const Destination& dst, bool flip) {
  auto src_row = [&src](int y) { return src.row(y); };
  if (flip && junk.size() < dst.row_bytes()) junk.resize(dst.row_bytes());
  for (int y = 0; y < dst.height; ++y) {
    if (!flip) {
      RunVertical(y, src_row, dst.row_bytes(), dst.row(y));
    } else {
      RunVertical(y, src_row, dst.row_bytes(), junk.data());
      ReverseRow(junk.data(), dst.width, dst.row(y));
    }
  }
}

// Vertical first filters dst.height source-wide rows, then those rows horizontally; horizontal
// first filters every source row a vertical window reaches, then dst.height rows dst.width wide
// vertically. The cheaper order by the cost model above runs.
void Resizer::State::BothPasses(const ImageView& src, const Destination& dst,
                                HorizontalKernel kernel, bool flip) {
  const int sw = src.width, sh = src.height, dw = dst.width, dh = dst.height;
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
  auto src_row = [&src](int y) { return src.row(y); };
  if (v_first <= h_first) {
    // The vertical pass writes straight into the padded horizontal inputs.
    const size_t in_bytes = size_t{3} * sw;
    const uint8_t* in[kRowsPerStep];
    uint8_t* out[kRowsPerStep];
    for (int y0 = 0; y0 < dh; y0 += kRowsPerStep) {
      const int count = std::min(kRowsPerStep, dh - y0);
      for (int r = 0; r < kRowsPerStep; ++r) {
        if (r < count) RunVertical(y0 + r, src_row, in_bytes, input(r));
        in[r] = input(r < count ? r : 0);
        out[r] = r < count ? dst.row(y0 + r) : junk.data();
      }
      kernel(in, out, fx, flip, &tile);
    }
    return;
  }
  const size_t dst_row_bytes = dst.row_bytes();
  rows.resize(static_cast<size_t>(last_row - first_row) * dst_row_bytes);
  auto row_of_rows = [this, first_row, dst_row_bytes](int y) {
    return &rows[static_cast<size_t>(y - first_row) * dst_row_bytes];
  };
  HorizontalPass(src, first_row, last_row, row_of_rows, kernel, flip);
  for (int y = 0; y < dh; ++y) RunVertical(y, row_of_rows, dst_row_bytes, dst.row(y));
}

// Vertical first, kRowsPerStep output rows at a time, in float throughout: scratch stays at
// kRowsPerStep source-wide rows however tall the source. (The references filter horizontally
// first; in float the order changes a sum by rounding error only.)
void Resizer::State::FloatPasses(const ImageView& src, const Destination& dst, bool flip) {
  const size_t row_floats = size_t{3} * src.width;
  if (float_rows.size() < kRowsPerStep * row_floats) float_rows.resize(kRowsPerStep * row_floats);
  if (junk.size() < dst.row_bytes()) junk.resize(dst.row_bytes());
  const float* in[kRowsPerStep];
  uint8_t* out[kRowsPerStep];
  for (int y0 = 0; y0 < dst.height; y0 += kRowsPerStep) {
    const int count = std::min(kRowsPerStep, dst.height - y0);
    for (int r = 0; r < kRowsPerStep; ++r) {
      if (r < count) {
        const int y = y0 + r, n = float_y.count[y];
        taps.resize(n);
        for (int k = 0; k < n; ++k) taps[k] = src.row(float_y.start[y] + k);
        vertical_float(taps.data(), &float_y.weights[static_cast<size_t>(y) * float_y.taps], n,
                       row_floats, &float_rows[r * row_floats]);
      }
      in[r] = &float_rows[(r < count ? r : 0) * row_floats];
      out[r] = r < count ? dst.row(y0 + r) : junk.data();
    }
    horizontal_float(in, out, float_x, flip, &float_tile);
  }
}

Resizer::Resizer(Kernels kernels) : state_(std::make_unique<State>()) {
  if (kernels == Kernels::kPortable) return;
  if (const VerticalKernel avx2 = resize_internal::VerticalAvx2Kernel(); avx2 != nullptr) {
    state_->simd = true;
    state_->vertical = avx2;
    state_->name = "avx2";
    state_->vertical_float = resize_internal::VerticalFloatAvx2Kernel();
    state_->horizontal_float = resize_internal::HorizontalFloatAvx2Kernel();
    const VerticalKernel avx512 = resize_internal::VerticalAvx512Kernel();
    if (kernels == Kernels::kBest && avx512 != nullptr) {
      state_->vertical = avx512;
      state_->name = "avx512";
    }
  }
}
Resizer::~Resizer() = default;
Resizer::Resizer(Resizer&&) noexcept = default;
Resizer& Resizer::operator=(Resizer&&) noexcept = default;

std::string_view Resizer::kernels_name() const { return state_->name; }

void Resizer::Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height,
                     size_t dst_stride, bool flip_horizontal) {
  Resize(src, dst, dst_width, dst_height, dst_stride,
         ResizeOptions{ResizeFilter::kBilinear, flip_horizontal, /*flip_vertical=*/false});
}

void Resizer::Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height,
                     size_t dst_stride, const ResizeOptions& options) {
  if (dst_width <= 0 || dst_height <= 0 || src.width <= 0 || src.height <= 0) return;
  State& s = *state_;
  const Destination to{dst, dst_width, dst_height, dst_stride, options.flip_vertical};
  const bool flip = options.flip_horizontal;
  const bool horizontal = src.width != dst_width;
  const bool vertical = src.height != dst_height;
  if (!horizontal && !vertical) return s.Copy(src, to, flip);

  if (options.filter != ResizeFilter::kBilinear) {
    if (!s.float_y.BuiltFor(options.filter, src.height, dst_height)) {
      s.float_y.Build(options.filter, src.height, dst_height);
    }
    if (!s.float_x.BuiltFor(options.filter, src.width, dst_width)) {
      s.float_x.Build(options.filter, src.width, dst_width);
    }
    return s.FloatPasses(src, to, flip);
  }

  if (vertical && (s.fy.in_size != src.height || s.fy.out_size != dst_height)) {
    s.fy.Build(src.height, dst_height);
  }
  if (horizontal && (s.fx.in_size != src.width || s.fx.out_size != dst_width)) {
    s.fx.Build(src.width, dst_width);
  }
  if (!horizontal) return s.VerticalOnly(src, to, flip);

  const HorizontalKernel kernel = s.simd ? resize_internal::HorizontalAvx2Kernel(s.fx.pairs)
                                         : resize_internal::HorizontalPortable;
  s.in_stride = size_t{3} * src.width + s.fx.overread();
  // resize() keeps old contents: the padding only ever holds bytes, which meet zero weights.
  if (s.inputs.size() < kRowsPerStep * s.in_stride) s.inputs.resize(kRowsPerStep * s.in_stride);
  if (s.junk.size() < to.row_bytes()) s.junk.resize(to.row_bytes());
  if (!vertical) {
    s.HorizontalPass(
        src, 0, src.height, [&to](int y) { return to.row(y); }, kernel, flip);
    return;
  }
  s.BothPasses(src, to, kernel, flip);
}

namespace {

// The free functions' Resizer, one per thread for both signatures.
Resizer& ThreadResizer() {
  thread_local Resizer resizer;
  return resizer;
}

}  // namespace

void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
            bool flip_horizontal) {
  ThreadResizer().Resize(src, dst, dst_width, dst_height, dst_stride, flip_horizontal);
}

void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
            const ResizeOptions& options) {
  ThreadResizer().Resize(src, dst, dst_width, dst_height, dst_stride, options);
}

}  // namespace sluice

// Resize's filters (bilinear, area, bicubic) and mirrors through ResizeOptions: the invariants
// every filter keeps, the mirrors against resize-then-flip, bicubic's clamped overshoot, kernels
// that agree, and the fused ROI decode against decode-then-resize. Closeness to torchvision and
// Pillow is tests/python/test_torchvision_resize.py's.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "formats/image_ops.h"
#include "formats/jpeg_roi_decoder.h"
#include "tests/formats/jpeg_roi_decoder_test_support.h"
#include "tests/formats/test_images.h"

namespace sluice {
namespace {

using testing::FilterName;
using testing::RandomImage;

constexpr std::array<ResizeFilter, 3> kFilters = {ResizeFilter::kBilinear, ResizeFilter::kArea,
                                                  ResizeFilter::kBicubic};

ResizeOptions Options(ResizeFilter f, bool flip_horizontal = false, bool flip_vertical = false) {
  ResizeOptions o;
  o.filter = f;
  o.flip_horizontal = flip_horizontal;
  o.flip_vertical = flip_vertical;
  return o;
}

Image ResizedWith(Resizer& resizer, const ImageView& src, int width, int height,
                  const ResizeOptions& options) {
  Image out;
  out.Resize(width, height);
  resizer.Resize(src, out.pixels.data(), width, height, static_cast<size_t>(width) * 3, options);
  return out;
}

Image Resized(const ImageView& src, int width, int height, const ResizeOptions& options) {
  Image out;
  out.Resize(width, height);
  Resize(src, out.pixels.data(), width, height, static_cast<size_t>(width) * 3, options);
  return out;
}

Image FlippedRows(const Image& img) {
  Image out = img;
  const size_t row = static_cast<size_t>(img.width) * 3;
  for (int y = 0; y < img.height; ++y) {
    std::copy_n(&img.pixels[(img.height - 1 - y) * row], row, &out.pixels[y * row]);
  }
  return out;
}

Image FlippedColumns(Image img) {
  FlipHorizontal(img.pixels.data(), img.width, img.height, static_cast<size_t>(img.width) * 3);
  return img;
}

struct SizeCase {
  int sw, sh, dw, dh;
};

// Shrinking by 2, 3.7 and more, enlarging, one axis only, odd sizes, single rows and columns.
std::vector<SizeCase> Cases() {
  std::vector<SizeCase> cases = {{64, 48, 32, 24},   {370, 259, 100, 70}, {120, 100, 180, 150},
                                 {131, 97, 203, 45}, {97, 131, 97, 40},   {97, 131, 30, 131},
                                 {1, 50, 9, 50},     {50, 1, 7, 3},       {1, 1, 5, 4},
                                 {5, 4, 1, 1},       {700, 9, 3, 40},     {2, 900, 224, 5},
                                 {33, 33, 31, 35},   {640, 480, 224, 224}};
  std::mt19937 rng(16);
  auto size = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 40; ++i) {
    cases.push_back({size(1, 400), size(1, 400), size(1, 300), size(1, 300)});
  }
  return cases;
}

#define DESCRIBE(c, f) \
  INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh << " " << FilterName(f))

TEST_CASE("ConstantImageStaysConstantForEveryFilter") {
  // Every window's weights sum to 1, bicubic's negative lobes included: no level drifts.
  Resizer portable(Resizer::Kernels::kPortable), best;
  for (const SizeCase& c : Cases()) {
    for (ResizeFilter f : kFilters) {
      DESCRIBE(c, f);
      for (const std::array<uint8_t, 3>& rgb :
           {std::array<uint8_t, 3>{0, 255, 128}, std::array<uint8_t, 3>{1, 254, 37}}) {
        Image src;
        src.Resize(c.sw, c.sh);
        for (size_t i = 0; i < src.pixels.size(); ++i) src.pixels[i] = rgb[i % 3];
        Image want;
        want.Resize(c.dw, c.dh);
        for (size_t i = 0; i < want.pixels.size(); ++i) want.pixels[i] = rgb[i % 3];
        for (Resizer* r : {&portable, &best}) {
          REQUIRE(ResizedWith(*r, src.view(), c.dw, c.dh, Options(f, true, true)).pixels ==
                  want.pixels);
        }
      }
    }
  }
}

TEST_CASE("IdenticalSizeCopiesExactlyForEveryFilterAndMirror") {
  const Image parent = RandomImage(45, 31, 3);
  const ImageView src = parent.view().Crop(4, 2, 37, 23);
  Image copy;
  copy.Resize(37, 23);
  for (int y = 0; y < 23; ++y) std::copy_n(src.row(y), 37 * 3, &copy.pixels[y * 37 * 3]);
  for (ResizeFilter f : kFilters) {
    INFO(FilterName(f));
    REQUIRE(Resized(src, 37, 23, Options(f)).pixels == copy.pixels);
    REQUIRE(Resized(src, 37, 23, Options(f, true, false)).pixels == FlippedColumns(copy).pixels);
    REQUIRE(Resized(src, 37, 23, Options(f, false, true)).pixels == FlippedRows(copy).pixels);
  }
}

TEST_CASE("VerticalFlipEqualsResizeThenFlipRows") {
  for (Resizer::Kernels kernels : {Resizer::Kernels::kBest, Resizer::Kernels::kPortable}) {
    Resizer resizer(kernels);
    for (const SizeCase& c : Cases()) {
      const Image parent = RandomImage(c.sw + 3, c.sh + 2, static_cast<uint32_t>(c.sw + c.dh));
      const ImageView src = parent.view().Crop(3, 2, c.sw, c.sh);
      for (ResizeFilter f : kFilters) {
        DESCRIBE(c, f);
        INFO("kernels: " << resizer.kernels_name());
        REQUIRE(ResizedWith(resizer, src, c.dw, c.dh, Options(f, false, true)).pixels ==
                FlippedRows(ResizedWith(resizer, src, c.dw, c.dh, Options(f))).pixels);
      }
    }
  }
}

TEST_CASE("BothFlipsEqualResizeThenFlipColumnsAndRows") {
  for (Resizer::Kernels kernels : {Resizer::Kernels::kBest, Resizer::Kernels::kPortable}) {
    Resizer resizer(kernels);
    for (const SizeCase& c : Cases()) {
      const Image src = RandomImage(c.sw, c.sh, static_cast<uint32_t>(c.dw * 7 + c.sh));
      for (ResizeFilter f : kFilters) {
        DESCRIBE(c, f);
        const Image plain = ResizedWith(resizer, src.view(), c.dw, c.dh, Options(f));
        REQUIRE(ResizedWith(resizer, src.view(), c.dw, c.dh, Options(f, true, false)).pixels ==
                FlippedColumns(plain).pixels);
        REQUIRE(ResizedWith(resizer, src.view(), c.dw, c.dh, Options(f, true, true)).pixels ==
                FlippedRows(FlippedColumns(plain)).pixels);
      }
    }
  }
}

TEST_CASE("BilinearOptionsGiveTheBoolRecipesBytes") {
  // The bool overloads are today's recipe; {kBilinear, flip, false} must be that very recipe.
  Resizer with_bool, with_options;
  for (const SizeCase& c : Cases()) {
    const Image src = RandomImage(c.sw, c.sh, static_cast<uint32_t>(c.sw * 3 + c.dw));
    for (bool flip : {false, true}) {
      INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh << (flip ? " flipped" : ""));
      Image a;
      a.Resize(c.dw, c.dh);
      with_bool.Resize(src.view(), a.pixels.data(), c.dw, c.dh, size_t{3} * c.dw, flip);
      REQUIRE(
          ResizedWith(with_options, src.view(), c.dw, c.dh, Options(ResizeFilter::kBilinear, flip))
              .pixels == a.pixels);
    }
  }
}

// The float path's filters computed independently, in double, as Pillow's Resample.c and torch's
// _upsample_*_aa do: each axis in turn, nothing rounded until the end. Unclamped.
double Kernel(ResizeFilter f, double x) {
  x = std::abs(x);
  switch (f) {
    case ResizeFilter::kBilinear:
      return x < 1 ? 1 - x : 0;
    case ResizeFilter::kArea:
      return 0;  // not used: the box's half-open edge needs the sign (BoxKernel)
    case ResizeFilter::kBicubic:
      return x < 1 ? (1.5 * x - 2.5) * x * x + 1 : x < 2 ? -0.5 * (((x - 5) * x + 8) * x - 4) : 0;
  }
  return 0;
}

std::vector<double> ExactAxis(ResizeFilter f, const std::vector<double>& in, int out) {
  const int n = static_cast<int>(in.size());
  if (n == out) return in;
  const double scale = static_cast<double>(n) / out, stretch = std::max(scale, 1.0);
  const double support = (f == ResizeFilter::kBicubic ? 2.0
                          : f == ResizeFilter::kArea  ? 0.5
                                                      : 1.0) *
                         stretch;
  std::vector<double> result(out);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    const int first = std::max(static_cast<int>(center - support + 0.5), 0);
    const int end = std::min(static_cast<int>(center + support + 0.5), n);
    double sum = 0, total = 0;
    for (int p = first; p < end; ++p) {
      const double x = (p - center + 0.5) / stretch;
      const double w = f == ResizeFilter::kArea ? (x > -0.5 && x <= 0.5 ? 1.0 : 0.0) : Kernel(f, x);
      sum += w * in[p];
      total += w;
    }
    result[i] = sum / total;
  }
  return result;
}

// Channel c of src resized exactly: out[y][x].
std::vector<std::vector<double>> ExactResize(const Image& src, int c, int dw, int dh,
                                             ResizeFilter f) {
  std::vector<std::vector<double>> rows(src.height);
  for (int y = 0; y < src.height; ++y) {
    std::vector<double> row(src.width);
    for (int x = 0; x < src.width; ++x)
      row[x] = src.pixels[(size_t{3} * y * src.width) + 3 * x + c];
    rows[y] = ExactAxis(f, row, dw);
  }
  std::vector<std::vector<double>> out(dh, std::vector<double>(dw));
  for (int x = 0; x < dw; ++x) {
    std::vector<double> column(src.height);
    for (int y = 0; y < src.height; ++y) column[y] = rows[y][x];
    const std::vector<double> resized = ExactAxis(f, column, dh);
    for (int y = 0; y < dh; ++y) out[y][x] = resized[y];
  }
  return out;
}

TEST_CASE("BicubicOvershootIsClampedTo0And255") {
  // A hard black/white edge, enlarged and shrunk: bicubic's negative lobes ring past both ends.
  // The exact filter overshoots (checked, so the case means something); ours gives 0 and 255
  // there, and elsewhere the exact value rounded (within float rounding at a tie).
  Image src;
  src.Resize(23, 17);
  for (int y = 0; y < 17; ++y) {
    for (int x = 0; x < 23; ++x) {
      const uint8_t v = (x < 9) != (y < 6) ? 255 : 0;
      for (int c = 0; c < 3; ++c) src.pixels[(size_t{3} * y * 23) + 3 * x + c] = v;
    }
  }
  for (const SizeCase& c : {SizeCase{23, 17, 61, 40}, SizeCase{23, 17, 10, 7},
                            SizeCase{23, 17, 23, 40}, SizeCase{23, 17, 12, 17}}) {
    INFO(c.dw << "x" << c.dh);
    const Image got = Resized(src.view(), c.dw, c.dh, Options(ResizeFilter::kBicubic));
    const auto exact = ExactResize(src, 1, c.dw, c.dh, ResizeFilter::kBicubic);
    double lowest = 0, highest = 255;
    for (int y = 0; y < c.dh; ++y) {
      for (int x = 0; x < c.dw; ++x) {
        const double e = exact[y][x];
        lowest = std::min(lowest, e);
        highest = std::max(highest, e);
        const int g = got.pixels[(size_t{3} * y * c.dw) + 3 * x + 1];
        INFO("at " << x << "," << y << ": exact " << e << ", got " << g);
        if (e <= 0) REQUIRE(g == 0);
        if (e >= 255) REQUIRE(g == 255);
        REQUIRE(std::abs(g - std::clamp(e, 0.0, 255.0)) <= 0.5 + 1e-3);
      }
    }
    REQUIRE(lowest < -5);
    REQUIRE(highest > 260);
  }
}

TEST_CASE("FloatPathIsTheExactFilterRounded") {
  // Area and bicubic on noise: each output is the exact (double) filter's value, rounded; float
  // rounding may only move a value lying within 1e-3 of a half.
  for (const SizeCase& c :
       {SizeCase{64, 48, 32, 24}, SizeCase{370, 259, 100, 70}, SizeCase{120, 100, 180, 150},
        SizeCase{131, 97, 203, 45}, SizeCase{7, 300, 5, 11}}) {
    const Image src = RandomImage(c.sw, c.sh, static_cast<uint32_t>(c.sw + c.dh));
    for (ResizeFilter f : {ResizeFilter::kArea, ResizeFilter::kBicubic}) {
      DESCRIBE(c, f);
      const Image got = Resized(src.view(), c.dw, c.dh, Options(f));
      double worst = 0;
      std::string where;
      for (int ch = 0; ch < 3; ++ch) {
        const auto exact = ExactResize(src, ch, c.dw, c.dh, f);
        for (int y = 0; y < c.dh; ++y) {
          for (int x = 0; x < c.dw; ++x) {
            const double e = std::clamp(exact[y][x], 0.0, 255.0);
            const int g = got.pixels[(size_t{3} * y * c.dw) + 3 * x + ch];
            if (std::abs(g - e) > worst) {
              worst = std::abs(g - e);
              where = std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(ch) +
                      ": exact " + std::to_string(e) + ", got " + std::to_string(g);
            }
          }
        }
      }
      INFO("worst at " << where);
      REQUIRE(worst <= 0.5 + 1e-3);
    }
  }
}

TEST_CASE("SimdAndPortableKernelsAreIdenticalForEveryFilter") {
  Resizer portable(Resizer::Kernels::kPortable), avx2(Resizer::Kernels::kAvx2), best;
  INFO("kernels: " << best.kernels_name() << " and " << avx2.kernels_name());
  for (const SizeCase& c : Cases()) {
    const Image parent = RandomImage(c.sw + 7, c.sh + 5, static_cast<uint32_t>(c.sw * 31 + c.dh));
    const ImageView src = parent.view().Crop(c.sw % 7, c.sh % 5, c.sw, c.sh);
    for (ResizeFilter f : kFilters) {
      for (int flips = 0; flips < 4; ++flips) {
        DESCRIBE(c, f);
        const ResizeOptions o = Options(f, (flips & 1) != 0, (flips & 2) != 0);
        const Image want = ResizedWith(portable, src, c.dw, c.dh, o);
        REQUIRE(ResizedWith(avx2, src, c.dw, c.dh, o).pixels == want.pixels);
        REQUIRE(ResizedWith(best, src, c.dw, c.dh, o).pixels == want.pixels);
      }
    }
  }
}

TEST_CASE("PaddingPastEachRowIsUntouchedForEveryFilterAndMirror") {
  // Rows dst_stride apart, the bytes between them the caller's: the kernels' wide stores must stop
  // at each row's dst_width * 3 bytes, mirrored or not, and every row land where it belongs.
  constexpr uint8_t kSentinel = 0xA5;
  Resizer portable(Resizer::Kernels::kPortable), best;
  for (const SizeCase& c : Cases()) {
    const Image src = RandomImage(c.sw, c.sh, static_cast<uint32_t>(c.sw + 5 * c.dh));
    const size_t row = size_t{3} * c.dw, stride = row + 7;
    for (ResizeFilter f : kFilters) {
      for (int flips = 0; flips < 4; ++flips) {
        DESCRIBE(c, f);
        const ResizeOptions o = Options(f, (flips & 1) != 0, (flips & 2) != 0);
        for (Resizer* r : {&portable, &best}) {
          const Image packed = ResizedWith(*r, src.view(), c.dw, c.dh, o);
          std::vector<uint8_t> padded(stride * c.dh + 9, kSentinel);
          r->Resize(src.view(), padded.data(), c.dw, c.dh, stride, o);
          for (int y = 0; y < c.dh; ++y) {
            const uint8_t* at = &padded[y * stride];
            REQUIRE(std::equal(at, at + row, &packed.pixels[y * row]));
            REQUIRE(std::all_of(at + row, at + stride, [](uint8_t b) { return b == kSentinel; }));
          }
          REQUIRE(std::all_of(padded.end() - 9, padded.end(),
                              [](uint8_t b) { return b == kSentinel; }));
        }
      }
    }
  }
}

TEST_CASE("SwitchingFiltersAtOneSizeRebuildsTheFilters") {
  // A Resizer keeps the last filters per size; a new filter at the same sizes must not reuse them.
  const Image src = RandomImage(300, 200, 9);
  Resizer reused;
  for (int round = 0; round < 2; ++round) {
    for (ResizeFilter f : kFilters) {
      INFO(FilterName(f));
      Resizer fresh;
      REQUIRE(ResizedWith(reused, src.view(), 120, 90, Options(f)).pixels ==
              ResizedWith(fresh, src.view(), 120, 90, Options(f)).pixels);
    }
  }
}

TEST_CASE("RoiDecodeWithOptionsEqualsDecodeThenResizeAtFullScale") {
  // Crops under twice the output size decode at full scale, where the window is exact: the fused
  // decode must then give Resize's very bytes for every filter and mirror.
  using namespace roi_testing;
  JpegRoiDecoder decoder;
  for (const TestImage& t : TestImages()) {
    const Image full = FullDecode(t.jpeg);
    const CropWindow crop{full.width / 5, full.height / 7, full.width / 2 + 3, full.height / 2 + 1};
    for (ResizeFilter f : kFilters) {
      for (int flips = 0; flips < 4; ++flips) {
        const ResizeOptions o = Options(f, (flips & 1) != 0, (flips & 2) != 0);
        for (const std::array<int, 2>& size :
             {std::array<int, 2>{crop.width * 2 / 3, crop.height * 3 / 4},
              std::array<int, 2>{crop.width + 9, crop.height * 3 / 2}}) {
          const int ow = size[0], oh = size[1];
          INFO(t.name << " " << Describe(crop, ow, oh, o.flip_horizontal) << " " << FilterName(f)
                      << (o.flip_vertical ? " upside down" : ""));
          std::vector<uint8_t> got(static_cast<size_t>(ow) * oh * 3);
          RoiDecodeStats stats;
          const Status s =
              decoder.DecodeCrop(t.jpeg, crop, ow, oh, o, got.data(), static_cast<size_t>(ow) * 3,
                                 kDefaultMaxPixels, &stats);
          INFO(s.ToString());
          REQUIRE(s.ok());
          REQUIRE(stats.scale_denom == 1);
          const Image want =
              Resized(full.view().Crop(crop.x, crop.y, crop.width, crop.height), ow, oh, o);
          REQUIRE(got == want.pixels);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice

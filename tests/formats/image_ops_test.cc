#include "formats/image_ops.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "tests/formats/test_images.h"

namespace sluice {
namespace {

using testing::At;
using testing::Filled;
using testing::RandomImage;

Image Resized(const ImageView& src, int width, int height) {
  Image out;
  out.Resize(width, height);
  Resize(src, out.pixels.data(), width, height, static_cast<size_t>(width) * 3);
  return out;
}

double Mean(const std::vector<uint8_t>& v) {
  double sum = 0;
  for (uint8_t x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

TEST_CASE("ResizeToSameSizeIsExactCopy") {
  const Image src = RandomImage(37, 23, 1);
  REQUIRE(Resized(src.view(), 37, 23).pixels == src.pixels);
  // Through a crop view with the parent's stride too.
  const ImageView crop = src.view().Crop(5, 3, 20, 11);
  const Image out = Resized(crop, 20, 11);
  for (int y = 0; y < 11; ++y) {
    for (int x = 0; x < 20; ++x) {
      for (int c = 0; c < 3; ++c) REQUIRE(At(out, x, y, c) == At(src, x + 5, y + 3, c));
    }
  }
}

TEST_CASE("ConstantImageStaysConstantAtAnySize") {
  const std::pair<int, int> sizes[] = {{1, 1},    {2, 3},   {224, 224}, {500, 375}, {7, 1000},
                                       {1000, 7}, {1, 300}, {300, 1},   {33, 17},   {641, 479}};
  const Image srcs[] = {Filled(1, 1, 12, 200, 255), Filled(320, 240, 12, 200, 255),
                        Filled(3, 700, 12, 200, 255), Filled(900, 2, 12, 200, 255)};
  for (const Image& src : srcs) {
    for (auto [w, h] : sizes) {
      INFO(src.width << "x" << src.height << " -> " << w << "x" << h);
      const Image out = Resized(src.view(), w, h);
      for (size_t i = 0; i < out.pixels.size(); i += 3) {
        REQUIRE(out.pixels[i] == 12);
        REQUIRE(out.pixels[i + 1] == 200);
        REQUIRE(out.pixels[i + 2] == 255);
      }
    }
  }
}

// A checkerboard of size x size blocks in every channel.
Image Checkerboard(int width, int height, int size) {
  Image img;
  img.Resize(width, height);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const uint8_t v = ((x / size + y / size) % 2) ? 255 : 0;
      for (int c = 0; c < 3; ++c) img.pixels[(static_cast<size_t>(y) * width + x) * 3 + c] = v;
    }
  }
  return img;
}

TEST_CASE("DownscaleOfCheckerboardAveragesToMean") {
  // Shrinking by 4 a 1-pixel checkerboard, and by 8 a checkerboard of 4x4 blocks: each output's
  // filter covers whole periods of the pattern, so area averaging gives the mean everywhere
  // (127.5; the intermediate pass rounds to 128). Point-sampling bilinear would give 0 or 255.
  struct Case {
    int block, factor;
  };
  for (const Case c : {Case{1, 4}, Case{4, 8}, Case{2, 4}}) {
    const Image src = Checkerboard(64 * c.factor, 48 * c.factor, c.block);
    const Image out = Resized(src.view(), 64, 48);
    INFO("block " << c.block << " factor " << c.factor);
    for (int y = 0; y < 48; ++y) {
      for (int x = 0; x < 64; ++x) {
        const int v = At(out, x, y, 0);
        INFO("at " << x << "," << y << " = " << v);
        // Image edges renormalise a cut window, which shifts the balance slightly.
        const bool edge = x == 0 || y == 0 || x == 63 || y == 47;
        REQUIRE(std::abs(v - 127.5) <= (edge ? 40 : 1));
      }
    }
  }
}

TEST_CASE("DownscaleAveragesThinLinesInsteadOfDroppingThem") {
  // One white column in four: shrunk by 4, every output is the area mean 63.75. A bilinear filter
  // that only sampled the two nearest columns would miss the lines and give 0.
  Image src = Filled(400, 8, 0, 0, 0);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 400; x += 4) {
      for (int c = 0; c < 3; ++c) src.pixels[(y * 400 + x) * 3 + c] = 255;
    }
  }
  const Image out = Resized(src.view(), 100, 8);
  for (int x = 1; x < 99; ++x) REQUIRE(std::abs(At(out, x, 4, 1) - 63.75) <= 1);
}

TEST_CASE("DownscalePreservesMeanOfRandomImage") {
  const Image src = RandomImage(500, 375, 7);
  for (auto [w, h] : {std::pair{224, 224}, std::pair{100, 20}, std::pair{13, 300}}) {
    const Image out = Resized(src.view(), w, h);
    REQUIRE(std::abs(Mean(out.pixels) - Mean(src.pixels)) < 1.5);
  }
}

// The filter Resize implements, in double precision and without rounding between the passes:
// a triangle of radius max(scale, 1) around each output's centre, renormalised at the edges.
std::vector<std::vector<std::pair<int, double>>> ReferenceWeights(int in, int out) {
  const double scale = static_cast<double>(in) / out, radius = std::max(scale, 1.0);
  std::vector<std::vector<std::pair<int, double>>> w(out);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    double total = 0;
    for (int x = 0; x < in; ++x) {
      const double d = std::abs(x + 0.5 - center) / radius;
      if (d < 1) {
        w[i].push_back({x, 1 - d});
        total += 1 - d;
      }
    }
    for (auto& p : w[i]) p.second /= total;
  }
  return w;
}

Image ReferenceResize(const Image& src, int width, int height) {
  const auto wx = ReferenceWeights(src.width, width);
  const auto wy = ReferenceWeights(src.height, height);
  std::vector<double> rows(static_cast<size_t>(src.height) * width * 3);
  for (int y = 0; y < src.height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        for (auto [j, w] : wx[x]) v += w * At(src, j, y, c);
        rows[(static_cast<size_t>(y) * width + x) * 3 + c] = v;
      }
    }
  }
  Image out;
  out.Resize(width, height);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        for (auto [j, w] : wy[y]) v += w * rows[(static_cast<size_t>(j) * width + x) * 3 + c];
        out.pixels[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::lround(v));
      }
    }
  }
  return out;
}

TEST_CASE("ResizeIsWithinOneLevelOfExactFilter") {
  // Sizes that take each path: vertical or horizontal first, one pass only, and the exact
  // arithmetic used past 64 taps (2000 -> 7 rows).
  struct Case {
    int sw, sh, dw, dh;
  };
  const Case cases[] = {{500, 375, 224, 224}, {250, 188, 224, 224}, {224, 224, 256, 256},
                        {100, 80, 37, 300},   {90, 60, 45, 60},     {90, 60, 90, 25},
                        {31, 17, 200, 9},     {40, 2000, 19, 7},    {3, 1, 640, 2}};
  for (const Case& c : cases) {
    INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh);
    const Image src = RandomImage(c.sw, c.sh, static_cast<uint32_t>(c.sw * 7 + c.dh));
    const Image got = Resized(src.view(), c.dw, c.dh);
    const Image want = ReferenceResize(src, c.dw, c.dh);
    int worst = 0;
    double total = 0;
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      const int d = std::abs(got.pixels[i] - want.pixels[i]);
      worst = std::max(worst, d);
      total += d;
    }
    CHECK(worst <= 1);
    CHECK(total / static_cast<double>(got.pixels.size()) < 0.3);
  }
}

TEST_CASE("UpscaledGradientStaysMonotone") {
  Image src;
  src.Resize(8, 5);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 8; ++x) {
      for (int c = 0; c < 3; ++c) {
        src.pixels[(y * 8 + x) * 3 + c] = static_cast<uint8_t>(x * 30 + y * 5 + c);
      }
    }
  }
  const Image out = Resized(src.view(), 101, 37);
  for (int y = 0; y < 37; ++y) {
    for (int x = 1; x < 101; ++x) {
      for (int c = 0; c < 3; ++c) REQUIRE(At(out, x, y, c) >= At(out, x - 1, y, c));
    }
  }
  for (int x = 0; x < 101; ++x) {
    for (int y = 1; y < 37; ++y) REQUIRE(At(out, x, y, 0) >= At(out, x, y - 1, 0));
  }
  // Edge pixels keep the edge values: centres beyond the last source centre clamp to it.
  REQUIRE(At(out, 0, 0, 0) == At(src, 0, 0, 0));
  REQUIRE(At(out, 100, 36, 2) == At(src, 7, 4, 2));
}

TEST_CASE("OneByNAndNByOneImages") {
  // A 1-pixel-wide column: widening only repeats it; a 1-pixel row likewise.
  Image column;
  column.Resize(1, 50);
  for (int y = 0; y < 50; ++y)
    column.pixels[y * 3] = column.pixels[y * 3 + 1] = column.pixels[y * 3 + 2] =
        static_cast<uint8_t>(y * 5);
  const Image wide = Resized(column.view(), 9, 50);
  for (int y = 0; y < 50; ++y) {
    for (int x = 0; x < 9; ++x) REQUIRE(At(wide, x, y, 1) == y * 5);
  }
  const Image squeezed = Resized(column.view(), 1, 1);
  REQUIRE(std::abs(At(squeezed, 0, 0, 0) - 122.5) <= 1);  // mean of 0, 5, ..., 245

  Image row;
  row.Resize(60, 1);
  for (int x = 0; x < 60; ++x) row.pixels[x * 3] = static_cast<uint8_t>(x * 4);
  const Image tall = Resized(row.view(), 20, 7);
  for (int y = 1; y < 7; ++y) {
    for (int x = 0; x < 20; ++x) REQUIRE(At(tall, x, y, 0) == At(tall, x, 0, 0));
  }
  for (int x = 1; x < 20; ++x) REQUIRE(At(tall, x, 0, 0) > At(tall, x - 1, 0, 0));

  const Image dot = Filled(1, 1, 1, 2, 3);
  const Image big = Resized(dot.view(), 5, 4);
  REQUIRE(big.pixels == Filled(5, 4, 1, 2, 3).pixels);
}

TEST_CASE("ExtremeAspectRatios") {
  const Image src = RandomImage(2000, 3, 11);
  const Image a = Resized(src.view(), 3, 40);
  const Image b = Resized(Resized(src.view(), 1, 3).view(), 1, 1);
  REQUIRE(std::abs(Mean(a.pixels) - Mean(src.pixels)) < 3);
  REQUIRE(std::abs(Mean(b.pixels) - Mean(src.pixels)) < 6);
  const Image tall = RandomImage(2, 5000, 12);
  REQUIRE(std::abs(Mean(Resized(tall.view(), 224, 224).pixels) - Mean(tall.pixels)) < 3);
}

TEST_CASE("DstStrideIsHonouredAndPaddingUntouched") {
  const Image src = RandomImage(90, 70, 3);
  for (auto [w, h] : {std::pair{40, 30}, std::pair{90, 70}, std::pair{90, 20}, std::pair{41, 70},
                      std::pair{150, 100}}) {
    const size_t stride = static_cast<size_t>(w) * 3 + 13;
    std::vector<uint8_t> dst(stride * h + 5, 0xAB);
    Resize(src.view(), dst.data(), w, h, stride);
    const Image tight = Resized(src.view(), w, h);
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = dst.data() + y * stride;
      REQUIRE(std::equal(row, row + w * 3, tight.pixels.data() + static_cast<size_t>(y) * w * 3));
      for (size_t i = w * 3; i < stride; ++i) REQUIRE(row[i] == 0xAB);
    }
    for (size_t i = stride * h; i < dst.size(); ++i) REQUIRE(dst[i] == 0xAB);
  }
}

TEST_CASE("ResizeOfCropViewMatchesResizeOfCopiedCrop") {
  const Image src = RandomImage(120, 90, 5);
  const ImageView crop = src.view().Crop(17, 9, 61, 50);
  Image copy;
  copy.Resize(61, 50);
  for (int y = 0; y < 50; ++y)
    std::copy(crop.row(y), crop.row(y) + 61 * 3, &copy.pixels[y * 61 * 3]);
  REQUIRE(Resized(crop, 32, 24).pixels == Resized(copy.view(), 32, 24).pixels);
  REQUIRE(Resized(crop, 100, 77).pixels == Resized(copy.view(), 100, 77).pixels);
}

// Resizes with `resizer` into a buffer whose rows have `pad` extra bytes filled with 0xAB, checks
// that the padding was left alone, and returns the tightly packed result.
Image ResizedWith(Resizer& resizer, const ImageView& src, int width, int height, bool flip,
                  size_t pad = 7) {
  const size_t row_bytes = static_cast<size_t>(width) * 3, stride = row_bytes + pad;
  std::vector<uint8_t> buffer(stride * height, 0xAB);
  resizer.Resize(src, buffer.data(), width, height, stride, flip);
  Image out;
  out.Resize(width, height);
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = buffer.data() + y * stride;
    std::copy(row, row + row_bytes, out.pixels.data() + y * row_bytes);
    for (size_t i = row_bytes; i < stride; ++i) REQUIRE(row[i] == 0xAB);
  }
  return out;
}

struct SizeCase {
  int sw, sh, dw, dh;
};

// Sizes that reach every path: identical, one axis only, vertical or horizontal first, 1xN and Nx1,
// enlarging, shrinking up to windows of more than 5 horizontal taps (two loads per pixel) and more
// than 64 vertical taps (the exact 32-bit sum), row counts that are not a multiple of 4, and
// widths where the last step of 4 pixels is partial; then random ones.
std::vector<SizeCase> KernelCases() {
  std::vector<SizeCase> cases = {
      {37, 23, 37, 23},     {500, 375, 224, 224}, {330, 250, 224, 224}, {100, 80, 224, 224},
      {60, 60, 224, 224},   {375, 500, 224, 224}, {250, 188, 224, 224}, {224, 300, 224, 224},
      {300, 224, 224, 224}, {1, 50, 9, 50},       {1, 50, 1, 1},        {60, 1, 20, 7},
      {1, 1, 5, 4},         {7, 1000, 3, 5},      {1000, 7, 5, 3},      {40, 2000, 19, 7},
      {2000, 3, 3, 40},     {640, 480, 224, 224}, {1200, 90, 100, 45},  {31, 17, 200, 9},
      {3, 1, 640, 2},       {90, 60, 45, 60},     {90, 60, 90, 25},     {2, 5000, 224, 224},
      {33, 33, 5, 6},       {8, 8, 7, 7},         {6, 9, 1, 2},         {700, 2, 11, 3}};
  std::mt19937 rng(2024);
  auto size = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 150; ++i) {
    cases.push_back({size(1, 700), size(1, 700), size(1, 300), size(1, 300)});
  }
  return cases;
}

TEST_CASE("SimdKernelsMatchPortableExactly") {
  // The SIMD kernels compute the same integer sums as the portable ones, so any difference is a
  // bug. Crop views give odd source strides and offsets; the destination rows are padded.
  Resizer portable(Resizer::Kernels::kPortable), avx2(Resizer::Kernels::kAvx2), best;
  REQUIRE(portable.kernels_name() == "portable");
  INFO("kernels: " << best.kernels_name() << " and " << avx2.kernels_name());
  for (const SizeCase& c : KernelCases()) {
    const Image parent = RandomImage(c.sw + 7, c.sh + 5, static_cast<uint32_t>(c.sw * 31 + c.dh));
    const ImageView src = parent.view().Crop(c.sw % 7, c.sh % 5, c.sw, c.sh);
    for (bool flip : {false, true}) {
      INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh << (flip ? " flipped" : ""));
      const Image want = ResizedWith(portable, src, c.dw, c.dh, flip);
      REQUIRE(ResizedWith(avx2, src, c.dw, c.dh, flip, 1).pixels == want.pixels);
      REQUIRE(ResizedWith(best, src, c.dw, c.dh, flip, 0).pixels == want.pixels);
    }
  }
}

Image Flipped(Image img) {
  FlipHorizontal(img.pixels.data(), img.width, img.height, static_cast<size_t>(img.width) * 3);
  return img;
}

TEST_CASE("FusedFlipEqualsResizeThenFlipHorizontal") {
  for (Resizer::Kernels kernels : {Resizer::Kernels::kBest, Resizer::Kernels::kPortable}) {
    Resizer resizer(kernels);
    INFO("kernels: " << resizer.kernels_name());
    for (const SizeCase& c : KernelCases()) {
      INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh);
      const Image parent = RandomImage(c.sw + 3, c.sh + 2, static_cast<uint32_t>(c.dw * 17 + c.sh));
      const ImageView src = parent.view().Crop(3, 2, c.sw, c.sh);
      REQUIRE(ResizedWith(resizer, src, c.dw, c.dh, true).pixels ==
              Flipped(ResizedWith(resizer, src, c.dw, c.dh, false)).pixels);
    }
  }
  // The free function too.
  const Image src = RandomImage(330, 250, 23);
  Image fused;
  fused.Resize(224, 224);
  Resize(src.view(), fused.pixels.data(), 224, 224, 224 * 3, /*flip_horizontal=*/true);
  REQUIRE(fused.pixels == Flipped(Resized(src.view(), 224, 224)).pixels);
}

TEST_CASE("FilterReuseGivesTheSameResultsAcrossSizeChanges") {
  // One Resizer keeps the filters of the last sizes and its scratch: going back and forth between
  // sizes, sharing one axis or none, must give what a fresh Resizer gives.
  const Image parent = RandomImage(501, 501, 24);
  const SizeCase sequence[] = {{500, 375, 224, 224}, {500, 375, 224, 224}, {330, 250, 224, 224},
                               {500, 250, 224, 224}, {330, 375, 224, 224}, {500, 375, 100, 224},
                               {500, 375, 224, 100}, {60, 60, 224, 224},   {500, 375, 224, 224},
                               {375, 500, 224, 224}, {224, 224, 224, 224}, {500, 375, 224, 224},
                               {3, 500, 224, 224},   {500, 3, 224, 224},   {330, 250, 224, 224}};
  Resizer reused;
  for (bool flip : {false, true}) {
    for (const SizeCase& c : sequence) {
      INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh);
      const ImageView src = parent.view().Crop(1, 1, c.sw, c.sh);
      Resizer fresh;
      REQUIRE(ResizedWith(reused, src, c.dw, c.dh, flip).pixels ==
              ResizedWith(fresh, src, c.dw, c.dh, flip).pixels);
    }
  }
}

TEST_CASE("PortableKernelsAreWithinOneLevelOfExactFilter") {
  Resizer portable(Resizer::Kernels::kPortable);
  for (const SizeCase& c : {SizeCase{500, 375, 224, 224}, SizeCase{100, 80, 37, 300},
                            SizeCase{40, 2000, 19, 7}, SizeCase{3, 1, 640, 2}}) {
    INFO(c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh);
    const Image src = RandomImage(c.sw, c.sh, static_cast<uint32_t>(c.sw + c.dh));
    const Image got = ResizedWith(portable, src.view(), c.dw, c.dh, false);
    const Image want = ReferenceResize(src, c.dw, c.dh);
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      REQUIRE(std::abs(got.pixels[i] - want.pixels[i]) <= 1);
    }
  }
}

TEST_CASE("FlipTwiceIsIdentity") {
  for (int w : {1, 2, 7, 64}) {
    Image img = RandomImage(w, 5, static_cast<uint32_t>(w));
    const Image original = img;
    FlipHorizontal(img.pixels.data(), w, 5, static_cast<size_t>(w) * 3);
    for (int y = 0; y < 5; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) REQUIRE(At(img, x, y, c) == At(original, w - 1 - x, y, c));
      }
    }
    FlipHorizontal(img.pixels.data(), w, 5, static_cast<size_t>(w) * 3);
    REQUIRE(img.pixels == original.pixels);
  }
}

TEST_CASE("FlipHonoursStride") {
  std::vector<uint8_t> buf = {1, 2, 3, 4, 5, 6, 99, 7, 8, 9, 10, 11, 12, 99};
  FlipHorizontal(buf.data(), 2, 2, 7);
  REQUIRE(buf == std::vector<uint8_t>{4, 5, 6, 1, 2, 3, 99, 10, 11, 12, 7, 8, 9, 99});
}

TEST_CASE("GrayToRgbCopiesChannels") {
  const std::vector<uint8_t> gray = {0, 17, 255};
  std::vector<uint8_t> rgb(9);
  GrayToRgb(gray.data(), 3, rgb.data());
  REQUIRE(rgb == std::vector<uint8_t>{0, 0, 0, 17, 17, 17, 255, 255, 255});
}

TEST_CASE("CmykConversionsPlainAndAdobeInverted") {
  struct Case {
    uint8_t cmyk[4];
    bool inverted;
    uint8_t rgb[3];
  };
  const Case cases[] = {
      {{255, 0, 0, 0}, false, {0, 255, 255}},  // cyan ink
      {{0, 0, 0, 0}, false, {255, 255, 255}},  // no ink
      {{0, 0, 0, 255}, false, {0, 0, 0}},      // black
      {{128, 0, 255, 0}, false, {127, 255, 0}},
      {{0, 0, 0, 128}, false, {127, 127, 127}},
      {{0, 255, 255, 255}, true, {0, 255, 255}},  // Adobe: 255 means no ink
      {{255, 255, 255, 255}, true, {255, 255, 255}},
      {{255, 255, 255, 0}, true, {0, 0, 0}},
      {{128, 255, 64, 128}, true, {64, 128, 32}},
  };
  for (const Case& c : cases) {
    uint8_t rgb[3];
    CmykToRgb(c.cmyk, 1, c.inverted, rgb);
    INFO("cmyk " << int{c.cmyk[0]} << "," << int{c.cmyk[1]} << "," << int{c.cmyk[2]} << ","
                 << int{c.cmyk[3]} << " inverted " << c.inverted);
    CHECK(int{rgb[0]} == c.rgb[0]);
    CHECK(int{rgb[1]} == c.rgb[1]);
    CHECK(int{rgb[2]} == c.rgb[2]);
  }
}

}  // namespace
}  // namespace sluice

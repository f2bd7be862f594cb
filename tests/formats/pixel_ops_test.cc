// The colour ops' and the output writer's edge cases (formats/pixel_ops.h). Equality with
// torchvision on photo-like images is tests/python/test_torchvision_color.py's.
#include "formats/pixel_ops.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/pixel_ops_kernels.h"
#include "tests/formats/test_images.h"

namespace sluice {
namespace {

using pixel_internal::Kernels;
using testing::Filled;
using testing::Mutable;
using testing::RandomImage;

// Every colour whose channels are multiples of `step`, and every gray.
Image ColourCube(int step) {
  std::vector<uint8_t> px;
  for (int r = 0; r < 256; r += step) {
    for (int g = 0; g < 256; g += step) {
      for (int b = 0; b < 256; b += step) px.insert(px.end(), {uint8_t(r), uint8_t(g), uint8_t(b)});
    }
  }
  for (int v = 0; v < 256; ++v) px.insert(px.end(), {uint8_t(v), uint8_t(v), uint8_t(v)});
  Image img;
  img.Resize(static_cast<int>(px.size() / 3), 1);
  img.pixels = px;
  return img;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST_CASE("BrightnessFactorZeroIsBlackAndOneIsIdentity") {
  const Image src = RandomImage(31, 7, 1);
  Image img = src;
  AdjustBrightness(Mutable(img), 1.0);
  CHECK(img.pixels == src.pixels);
  AdjustBrightness(Mutable(img), 0.0);
  CHECK(img.pixels == std::vector<uint8_t>(src.pixels.size(), 0));
}

TEST_CASE("BrightnessAboveOneSaturatesAt255") {
  Image img = Filled(3, 2, 200, 100, 0);
  AdjustBrightness(Mutable(img), 1.5);
  CHECK(img.pixels[0] == 255);
  CHECK(img.pixels[1] == 150);
  CHECK(img.pixels[2] == 0);
}

TEST_CASE("ContrastFactorOneIsIdentityAndZeroIsTheTruncatedGrayMean") {
  const Image src = RandomImage(29, 11, 2);
  Image img = src;
  AdjustContrast(Mutable(img), 1.0);
  CHECK(img.pixels == src.pixels);
  // A constant image: its gray (0.2989 + 0.587 + 0.114) * 200 = 199.98 truncates to 199, as
  // torchvision's uint8 grayscale does, and factor 0 is that mean everywhere.
  Image constant = Filled(5, 4, 200, 200, 200);
  AdjustContrast(Mutable(constant), 0.0);
  CHECK(constant.pixels == std::vector<uint8_t>(constant.pixels.size(), 199));
}

TEST_CASE("SaturationFactorZeroIsGrayscaleAndOneIsIdentity") {
  const Image src = RandomImage(33, 9, 3);
  Image img = src;
  AdjustSaturation(Mutable(img), 1.0);
  CHECK(img.pixels == src.pixels);
  Image gray = src;
  ToGrayscale(Mutable(gray));
  AdjustSaturation(Mutable(img), 0.0);
  CHECK(img.pixels == gray.pixels);
}

TEST_CASE("GrayscaleOfWhiteIs254AsTorchvisionTruncates") {
  Image img = Filled(2, 2, 255, 255, 255);
  ToGrayscale(Mutable(img));
  CHECK(img.pixels == std::vector<uint8_t>(img.pixels.size(), 254));
  Image red = Filled(1, 1, 255, 0, 0);
  ToGrayscale(Mutable(red));
  CHECK(red.pixels == std::vector<uint8_t>{76, 76, 76});  // 0.2989 * 255 = 76.2
}

TEST_CASE("HueZeroIsIdentityForEveryColour") {
  const Image src = ColourCube(3);
  Image img = src;
  AdjustHue(Mutable(img), 0.0);
  CHECK(img.pixels == src.pixels);
}

TEST_CASE("HueHalfTurnsPureRedToCyanAndBothHalvesAgree") {
  Image red = Filled(1, 1, 255, 0, 0);
  AdjustHue(Mutable(red), 0.5);
  CHECK(red.pixels == std::vector<uint8_t>{0, 255, 255});

  const Image src = ColourCube(5);
  Image plus = src, minus = src;
  AdjustHue(Mutable(plus), 0.5);
  AdjustHue(Mutable(minus), -0.5);
  int max_diff = 0;
  for (size_t i = 0; i < src.pixels.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(int(plus.pixels[i]) - int(minus.pixels[i])));
  }
  CHECK(max_diff <= 1);
  // A gray has no hue: every rotation keeps it.
  Image gray = Filled(4, 1, 77, 77, 77);
  AdjustHue(Mutable(gray), 0.37);
  CHECK(gray.pixels == std::vector<uint8_t>(12, 77));
}

TEST_CASE("SolarizeThreshold256IsIdentityAndZeroInvertsAll") {
  const Image src = RandomImage(17, 5, 4);
  Image img = src;
  Solarize(Mutable(img), 256);
  CHECK(img.pixels == src.pixels);
  Solarize(Mutable(img), 0);
  for (size_t i = 0; i < src.pixels.size(); ++i) REQUIRE(img.pixels[i] == 255 - src.pixels[i]);
}

TEST_CASE("SolarizeComparesWithAFractionalThreshold") {
  Image img = Filled(1, 1, 128, 129, 127);
  Solarize(Mutable(img), 128.5);
  CHECK(img.pixels == std::vector<uint8_t>{128, 126, 127});
}

TEST_CASE("PosterizeEightBitsIsIdentityAndOneKeepsTheTopBit") {
  const Image src = RandomImage(19, 3, 5);
  Image img = src;
  Posterize(Mutable(img), 8);
  CHECK(img.pixels == src.pixels);
  Posterize(Mutable(img), 1);
  for (size_t i = 0; i < src.pixels.size(); ++i) REQUIRE(img.pixels[i] == (src.pixels[i] & 0x80));
}

TEST_CASE("GaussianBlurKernelSizeOneIsIdentity") {
  const Image src = RandomImage(23, 13, 6);
  Image img = src;
  std::vector<float> scratch;
  GaussianBlur(Mutable(img), 1, 2.0, &scratch);
  CHECK(img.pixels == src.pixels);
}

TEST_CASE("GaussianBlurKeepsAConstantImageConstant") {
  std::vector<float> scratch;
  for (int k : {3, 9, 23}) {
    Image img = Filled(40, 30, 201, 7, 255);
    GaussianBlur(Mutable(img), k, 3.0, &scratch);
    CHECK(img.pixels == Filled(40, 30, 201, 7, 255).pixels);
  }
}

TEST_CASE("GaussianBlurWiderThanTheImageReflectsAgain") {
  // torchvision refuses reflect padding >= the side; here it reflects as often as it takes.
  std::vector<float> scratch;
  Image constant = Filled(2, 3, 90, 91, 92);
  GaussianBlur(Mutable(constant), 21, 5.0, &scratch);
  CHECK(constant.pixels == Filled(2, 3, 90, 91, 92).pixels);
  Image one = Filled(1, 1, 10, 20, 30);
  GaussianBlur(Mutable(one), 9, 1.0, &scratch);
  CHECK(one.pixels == std::vector<uint8_t>{10, 20, 30});
}

TEST_CASE("GaussianBlurIsSymmetricAboutAnImpulse") {
  Image img = Filled(9, 9, 0, 0, 0);
  img.pixels[(4 * 9 + 4) * 3] = 255;
  std::vector<float> scratch;
  GaussianBlur(Mutable(img), 5, 1.0, &scratch);
  auto at = [&](int x, int y) { return img.pixels[(static_cast<size_t>(y) * 9 + x) * 3]; };
  CHECK(at(4, 4) > at(3, 4));
  CHECK(at(3, 4) == at(5, 4));
  CHECK(at(4, 3) == at(4, 5));
  CHECK(at(3, 4) == at(4, 3));
  CHECK(at(0, 0) == 0);
}

TEST_CASE("BFloat16RoundsTiesToEven") {
  CHECK(FloatToBFloat16(1.0f) == 0x3F80);
  CHECK(FloatToBFloat16(FromBits(0x3F808000)) == 0x3F80);  // halfway, even below
  CHECK(FloatToBFloat16(FromBits(0x3F818000)) == 0x3F82);  // halfway, even above
  CHECK(FloatToBFloat16(FromBits(0x3F808001)) == 0x3F81);
  CHECK(FloatToBFloat16(FromBits(0x3F807FFF)) == 0x3F80);
  CHECK(FloatToBFloat16(-0.0f) == 0x8000);
  CHECK(FloatToBFloat16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
}

TEST_CASE("BFloat16KeepsInfinitiesAndMakesNanTheCanonicalQuietNan") {
  CHECK(FloatToBFloat16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(FloatToBFloat16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()) == 0x7FC0);
  CHECK(FloatToBFloat16(FromBits(0xFF800001)) == 0x7FC0);  // a signalling NaN whose top is inf
  CHECK(std::isnan(BFloat16ToFloat(0x7FC0)));
}

TEST_CASE("BFloat16RoundTripsEveryValue") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    REQUIRE(FloatToBFloat16(f) == b);
  }
}

TEST_CASE("HalfRoundsTiesToEvenAndOverflowsToInfinity") {
  CHECK(FloatToHalf(1.0f) == 0x3C00);
  CHECK(FloatToHalf(FromBits(0x3F801000)) == 0x3C00);  // 1 + 2^-11: halfway, even below
  CHECK(FloatToHalf(FromBits(0x3F803000)) == 0x3C02);  // 1 + 3 * 2^-11: halfway, even above
  CHECK(FloatToHalf(65504.0f) == 0x7BFF);
  CHECK(FloatToHalf(65519.99f) == 0x7BFF);
  CHECK(FloatToHalf(65520.0f) == 0x7C00);  // halfway to 65536, which is past the largest: inf
  CHECK(FloatToHalf(-1e10f) == 0xFC00);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
}

TEST_CASE("HalfSubnormalsRoundTiesToEven") {
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);     // halfway to 2^-24: even is 0
  CHECK(FloatToHalf(std::ldexp(3.0f, -25)) == 0x0002);     // halfway: even is 2
  CHECK(FloatToHalf(std::ldexp(1.0f, -14)) == 0x0400);     // the smallest normal
  CHECK(FloatToHalf(std::ldexp(1023.5f, -24)) == 0x0400);  // rounds up into the normals
  CHECK(FloatToHalf(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("HalfKeepsInfinitiesAndQuietsNans") {
  CHECK(FloatToHalf(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(FloatToHalf(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);
  CHECK(FloatToHalf(FromBits(0xFF800001)) == 0xFE00);  // signalling: quieted, sign kept
  CHECK(std::isinf(HalfToFloat(0x7C00)));
  CHECK(std::isnan(HalfToFloat(0x7E00)));
}

TEST_CASE("HalfRoundTripsEveryValue") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    REQUIRE(FloatToHalf(f) == h);
  }
}

TEST_CASE("HalfPortableEqualsF16cOnEveryExponentAndTie") {
  if (!pixel_internal::HaveSimdKernels()) {
    WARN("no AVX2/F16C here: only the portable kernels run");
    return;
  }
  // Every sign, exponent and top mantissa bits, with low bits at and around each rounding tie.
  const uint32_t lows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0xFFFF};
  std::vector<float> in;
  for (uint32_t high = 0; high < 0x10000; ++high) {
    for (uint32_t low : lows) in.push_back(FromBits(high << 16 | low));
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) in.push_back(FromBits(static_cast<uint32_t>(rng())));
  std::vector<uint16_t> simd(in.size()), portable(in.size());
  pixel_internal::FloatsToHalf(in.data(), in.size(), simd.data(), Kernels::kBest);
  pixel_internal::FloatsToHalf(in.data(), in.size(), portable.data(), Kernels::kPortable);
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("float bits " << std::hex << Bits(in[i]));
    REQUIRE(simd[i] == portable[i]);
  }
}

struct Slot {
  std::vector<uint8_t> bytes;
};

OutputSpec NormalizedSpec(DType dtype, Layout layout) {
  OutputSpec spec;
  spec.dtype = dtype;
  spec.layout = layout;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    spec.scale[c] = 1.0f / (255.0f * std[c]);
    spec.bias[c] = -mean[c] / std[c];
  }
  return spec;
}

Slot Write(const ImageView& img, DType dtype, Layout layout, Kernels kernels) {
  const OutputSpec spec = NormalizedSpec(dtype, layout);
  Slot slot;
  // One spare element past the end, which the writer must leave alone.
  slot.bytes.assign((static_cast<size_t>(img.width) * img.height * 3 + 1) * DTypeSize(dtype), 0xAB);
  pixel_internal::WriteOutput(img, spec, slot.bytes.data(), kernels);
  return slot;
}

// A window of an image: the fused and sequential paths run on the same view.
struct Crop {
  int x, y, width, height;
};

MutableImageView CropOf(Image& img, const Crop& c) {
  const size_t stride = static_cast<size_t>(img.width) * 3;
  return MutableImageView{img.pixels.data() + c.y * stride + static_cast<size_t>(c.x) * 3, c.width,
                          c.height, stride};
}

// The slot for crop, with one spare element past the end, which the writers must leave alone.
size_t SlotBytes(const Crop& c, DType dtype) {
  return (static_cast<size_t>(c.width) * c.height * 3 + 1) * DTypeSize(dtype);
}

constexpr DType kDTypes[] = {DType::kUint8, DType::kFloat16, DType::kBFloat16, DType::kFloat32};

TEST_CASE("OutputNchwHoldsTheSameValuesAsNhwc") {
  // Widths around the SIMD kernels' 16-pixel steps; a view with a row stride past its width.
  const Image big = RandomImage(70, 6, 8);
  for (int width : {1, 15, 16, 17, 33, 64}) {
    const ImageView view = big.view().Crop(3, 1, width, 5);
    for (DType dtype : kDTypes) {
      const size_t size = DTypeSize(dtype);
      const Slot nhwc = Write(view, dtype, Layout::kNhwc, Kernels::kBest);
      const Slot nchw = Write(view, dtype, Layout::kNchw, Kernels::kBest);
      const size_t plane = static_cast<size_t>(width) * 5;
      for (size_t p = 0; p < plane; ++p) {
        for (size_t c = 0; c < 3; ++c) {
          INFO("width " << width << " dtype " << DTypeName(dtype) << " pixel " << p);
          REQUIRE(std::memcmp(&nhwc.bytes[(p * 3 + c) * size], &nchw.bytes[(c * plane + p) * size],
                              size) == 0);
        }
      }
      CHECK(nhwc.bytes.back() == 0xAB);
      CHECK(nchw.bytes.back() == 0xAB);
    }
  }
}

TEST_CASE("OutputIsXTimesScalePlusBias") {
  Image img = Filled(1, 1, 0, 128, 255);
  OutputSpec spec;
  spec.dtype = DType::kFloat32;
  spec.scale[0] = spec.scale[1] = spec.scale[2] = 0.5f;
  spec.bias[0] = -1.0f;
  spec.bias[1] = 2.0f;
  spec.bias[2] = 0.25f;
  float out[3];
  WriteOutput(img.view(), spec, out);
  CHECK(out[0] == -1.0f);
  CHECK(out[1] == 66.0f);
  CHECK(out[2] == 127.75f);
  uint16_t bf[3], half[3];
  spec.dtype = DType::kBFloat16;
  WriteOutput(img.view(), spec, bf);
  spec.dtype = DType::kFloat16;
  WriteOutput(img.view(), spec, half);
  for (int c = 0; c < 3; ++c) {
    CHECK(bf[c] == FloatToBFloat16(out[c]));
    CHECK(half[c] == FloatToHalf(out[c]));
  }
}

TEST_CASE("OutputSimdAndPortableKernelsWriteTheSameBytes") {
  if (!pixel_internal::HaveSimdKernels()) {
    WARN("no AVX2/F16C here: only the portable kernels run");
    return;
  }
  const Image big = RandomImage(230, 9, 9);
  for (int width : {1, 7, 16, 31, 224}) {
    const ImageView view = big.view().Crop(2, 1, width, 7);
    for (DType dtype : kDTypes) {
      for (Layout layout : {Layout::kNhwc, Layout::kNchw}) {
        INFO("width " << width << " " << DTypeName(dtype) << " " << LayoutName(layout));
        CHECK(Write(view, dtype, layout, Kernels::kBest).bytes ==
              Write(view, dtype, layout, Kernels::kPortable).bytes);
      }
    }
  }
}

TEST_CASE("ColourAndBlurSimdAndPortableKernelsWriteTheSameBytes") {
  if (!pixel_internal::HaveSimdKernels()) {
    WARN("no AVX2/F16C here: only the portable kernels run");
    return;
  }
  const Image cube = ColourCube(3);
  const Image odd = RandomImage(37, 29, 11);
  for (const Image* src : {&cube, &odd}) {
    for (double factor : {0.0, 0.6, 1.0, 1.4, 7.5}) {
      Image simd = *src, portable = *src;
      pixel_internal::AdjustSaturation(Mutable(simd), factor, Kernels::kBest);
      pixel_internal::AdjustSaturation(Mutable(portable), factor, Kernels::kPortable);
      INFO("saturation " << factor << " width " << src->width);
      CHECK(simd.pixels == portable.pixels);
      simd = portable = *src;
      pixel_internal::AdjustContrast(Mutable(simd), factor, Kernels::kBest);
      pixel_internal::AdjustContrast(Mutable(portable), factor, Kernels::kPortable);
      CHECK(simd.pixels == portable.pixels);
      simd = portable = *src;
      pixel_internal::AdjustBrightness(Mutable(simd), factor, Kernels::kBest);
      pixel_internal::AdjustBrightness(Mutable(portable), factor, Kernels::kPortable);
      CHECK(simd.pixels == portable.pixels);
    }
    Image simd = *src, portable = *src;
    pixel_internal::ToGrayscale(Mutable(simd), Kernels::kBest);
    pixel_internal::ToGrayscale(Mutable(portable), Kernels::kPortable);
    CHECK(simd.pixels == portable.pixels);
  }
  std::vector<float> scratch;
  for (int k : {3, 7, 23}) {
    Image simd = odd, portable = odd;
    pixel_internal::GaussianBlur(Mutable(simd), k, 1.7, &scratch, Kernels::kBest);
    pixel_internal::GaussianBlur(Mutable(portable), k, 1.7, &scratch, Kernels::kPortable);
    INFO("blur " << k);
    CHECK(simd.pixels == portable.pixels);
  }
}

TEST_CASE("HueSimdAndPortableKernelsWriteTheSameBytes") {
  if (!pixel_internal::HaveSimdKernels()) {
    WARN("no AVX2/F16C here: only the portable kernels run");
    return;
  }
  const Image cube = ColourCube(3);
  const Image odd = RandomImage(37, 5, 10);
  for (const Image* src : {&cube, &odd}) {
    for (double hue : {-0.5, -0.31, -0.01, 0.0, 0.02, 0.25, 0.49, 0.5}) {
      Image simd = *src, portable = *src;
      pixel_internal::AdjustHue(Mutable(simd), hue, Kernels::kBest);
      pixel_internal::AdjustHue(Mutable(portable), hue, Kernels::kPortable);
      INFO("hue " << hue << " width " << src->width);
      CHECK(simd.pixels == portable.pixels);
    }
  }
}

// The jitter steps one at a time on a copy of src, then WriteOutput: what JitterAndWrite fuses.
std::vector<uint8_t> SequentialJitter(const Image& src, const Crop& crop,
                                      const std::vector<JitterStep>& steps, const OutputSpec& spec,
                                      Kernels kernels) {
  Image img = src;
  const MutableImageView view = CropOf(img, crop);
  for (const JitterStep& s : steps) {
    switch (s.kind) {
      case JitterStep::Kind::kBrightness:
        pixel_internal::AdjustBrightness(view, s.factor, kernels);
        break;
      case JitterStep::Kind::kContrast:
        pixel_internal::AdjustContrast(view, s.factor, kernels);
        break;
      case JitterStep::Kind::kSaturation:
        pixel_internal::AdjustSaturation(view, s.factor, kernels);
        break;
      case JitterStep::Kind::kHue:
        pixel_internal::AdjustHue(view, s.factor, kernels);
        break;
    }
  }
  std::vector<uint8_t> out(SlotBytes(crop, spec.dtype), 0xAB);
  pixel_internal::WriteOutput(view.view(), spec, out.data(), kernels);
  return out;
}

std::vector<uint8_t> FusedJitter(const Image& src, const Crop& crop,
                                 const std::vector<JitterStep>& steps, const OutputSpec& spec,
                                 Kernels kernels) {
  Image img = src;
  std::vector<uint8_t> out(SlotBytes(crop, spec.dtype), 0xAB);
  pixel_internal::JitterAndWrite(CropOf(img, crop), steps.data(), static_cast<int>(steps.size()),
                                 spec, out.data(), kernels);
  return out;
}

std::string Describe(const std::vector<JitterStep>& steps) {
  std::string out;
  for (const JitterStep& s : steps) {
    out += std::to_string(static_cast<int>(s.kind)) + " " + std::to_string(s.factor) + ", ";
  }
  return out;
}

std::vector<Kernels> KernelPaths() {
  if (pixel_internal::HaveSimdKernels()) return {Kernels::kBest, Kernels::kPortable};
  WARN("no AVX2/F16C here: only the portable kernels run");
  return {Kernels::kPortable};
}

TEST_CASE("JitterAndWriteEqualsTheOpsInSequenceForRandomFactorsOrdersAndImages") {
  // Widths around the 16-pixel blocks, a view with a row stride past its width, an image-sized
  // one; each draw picks which of the four ops run, their order and factors (ColorJitter's
  // ranges and past them: a factor of 0, large ones that saturate).
  const Image big = RandomImage(240, 40, 21);
  const Image cube = ColourCube(5);
  std::mt19937 rng(22);
  std::uniform_real_distribution<double> factor(0.0, 2.5), hue(-0.5, 0.5);
  int cases = 0;
  for (int draw = 0; draw < 48; ++draw) {
    std::vector<JitterStep> steps;
    std::vector<int> order = {0, 1, 2, 3};
    std::shuffle(order.begin(), order.end(), rng);
    for (int k : order) {
      if (rng() % 4 == 0) continue;
      const auto kind = static_cast<JitterStep::Kind>(k);
      steps.push_back(JitterStep{kind, kind == JitterStep::Kind::kHue ? hue(rng) : factor(rng)});
    }
    const bool on_cube = draw % 6 == 0;
    const Image& src = on_cube ? cube : big;
    const int widths[] = {1, 15, 16, 17, 37, 224};
    const Crop crop = on_cube ? Crop{0, 0, cube.width, 1}
                              : Crop{static_cast<int>(rng() % 8), static_cast<int>(rng() % 4),
                                     widths[draw % 6], 1 + static_cast<int>(rng() % 30)};
    const Layout layout = draw % 2 ? Layout::kNchw : Layout::kNhwc;
    for (DType dtype : kDTypes) {
      const OutputSpec spec = NormalizedSpec(dtype, layout);
      for (Kernels kernels : KernelPaths()) {
        INFO("draw " << draw << " width " << crop.width << " height " << crop.height << " "
                     << DTypeName(dtype) << " " << LayoutName(layout) << " portable "
                     << (kernels == Kernels::kPortable));
        INFO("steps (kind factor) " << Describe(steps));
        REQUIRE(FusedJitter(src, crop, steps, spec, kernels) ==
                SequentialJitter(src, crop, steps, spec, kernels));
        ++cases;
      }
    }
  }
  CHECK(cases > 0);
}

TEST_CASE("JitterAndWriteTakesTheContrastMeanAfterTheStepsBeforeIt") {
  // Contrast first (the mean of the input), after others (the mean of their result), twice.
  const Image img = RandomImage(45, 13, 23);
  const Crop crop{2, 1, 40, 11};
  using K = JitterStep::Kind;
  const std::vector<std::vector<JitterStep>> lists = {
      {{K::kContrast, 0.3}},
      {{K::kContrast, 1.6}, {K::kBrightness, 0.7}},
      {{K::kBrightness, 1.9}, {K::kSaturation, 0.2}, {K::kContrast, 0.5}},
      {{K::kHue, 0.21}, {K::kContrast, 1.4}, {K::kSaturation, 1.3}, {K::kBrightness, 0.8}},
      {{K::kContrast, 0.6}, {K::kBrightness, 1.5}, {K::kContrast, 1.7}, {K::kHue, -0.4}},
      {},
  };
  for (const auto& steps : lists) {
    for (DType dtype : kDTypes) {
      for (Layout layout : {Layout::kNhwc, Layout::kNchw}) {
        const OutputSpec spec = NormalizedSpec(dtype, layout);
        for (Kernels kernels : KernelPaths()) {
          INFO(steps.size() << " steps " << DTypeName(dtype) << " " << LayoutName(layout));
          CHECK(FusedJitter(img, crop, steps, spec, kernels) ==
                SequentialJitter(img, crop, steps, spec, kernels));
        }
      }
    }
  }
}

TEST_CASE("JitterAndWriteWithANanFactorWritesBlackAsTheOpsDo") {
  const Image img = RandomImage(20, 3, 24);
  const Crop crop{0, 0, 20, 3};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (JitterStep::Kind kind : {JitterStep::Kind::kBrightness, JitterStep::Kind::kContrast,
                                JitterStep::Kind::kSaturation}) {
    const std::vector<JitterStep> steps = {{kind, nan}};
    const OutputSpec spec = NormalizedSpec(DType::kUint8, Layout::kNhwc);
    for (Kernels kernels : KernelPaths()) {
      const std::vector<uint8_t> fused = FusedJitter(img, crop, steps, spec, kernels);
      CHECK(fused == SequentialJitter(img, crop, steps, spec, kernels));
      CHECK(std::count(fused.begin(), fused.end() - 1, 0) == 20 * 3 * 3);
    }
  }
}

}  // namespace
}  // namespace sluice

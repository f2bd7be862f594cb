// The fused ROI decode against the full decode it stands in for: random windows of every kind of
// JPEG, the fast IDCT, DCT scaling, exact pixels at full scale, early stop, flip, stride, headers.
#include "formats/jpeg_roi_decoder.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "formats/crop_window.h"
#include "formats/jpeg_codec.h"
#include "tests/formats/jpeg_roi_decoder_test_support.h"
#include "tests/jpeg_test_images.h"

namespace sluice {
namespace {

using roi_testing::Decode;
using roi_testing::Describe;
using roi_testing::FullDecode;
using roi_testing::MaxAbsError;
using roi_testing::MeanAbsError;
using roi_testing::Reference;
using roi_testing::TestImage;
using roi_testing::TestImages;
using roi_testing::Textured;
using roi_testing::TexturedCmykJpeg;
using roi_testing::TexturedGrayJpeg;
using roi_testing::TexturedJpeg;
using testing::MakeTestJpeg;
using testing::TestJpegKind;

TEST_CASE("RandomWindowsMatchTheFullDecodeOfEveryKindOfJpeg") {
  const std::vector<std::pair<int, int>> outputs = {{224, 224}, {48, 32}, {17, 23}, {5, 5}};
  const std::vector<RandomResizedCropParams> params = {
      {}, {0.005, 0.05, 0.5, 2.0, 10}, {0.9, 1.0, 0.75, 1.33, 10}};
  JpegRoiDecoder decoder;
  for (const TestImage& image : TestImages()) {
    const Image full = FullDecode(image.jpeg);
    int scales_seen = 0;
    for (uint64_t stream = 0; stream < 48; ++stream) {
      AugmentRng rng(11, stream);
      const CropWindow c =
          RandomResizedCrop(full.width, full.height, params[stream % params.size()], rng);
      const auto [ow, oh] = outputs[(stream / params.size()) % outputs.size()];
      const bool flip = rng.NextDouble() < 0.5;
      RoiDecodeStats stats;
      const auto got = Decode(decoder, image.jpeg, c, ow, oh, flip, &stats);
      const auto want = Reference(full, c, ow, oh, flip);
      INFO(image.name << ": " << Describe(c, ow, oh, flip) << " at 1/" << stats.scale_denom);
      CHECK(MeanAbsError(got, want) < 2.5);
      scales_seen |= stats.scale_denom;
    }
    INFO(image.name);
    CHECK(scales_seen > 1);  // more than full scale was exercised
  }
}

TEST_CASE("FastIdctStaysCloseToTheAccurateOne") {
  JpegRoiDecoder accurate;
  JpegRoiDecoder fast(/*fast_idct=*/true);
  for (const TestImage& image : TestImages()) {
    const Image full = FullDecode(image.jpeg);
    bool differs = false;
    for (uint64_t stream = 0; stream < 12; ++stream) {
      AugmentRng rng(5, stream);
      const CropWindow c = RandomResizedCrop(full.width, full.height, {}, rng);
      const auto a = Decode(accurate, image.jpeg, c, 64, 64, false, nullptr);
      const auto f = Decode(fast, image.jpeg, c, 64, 64, false, nullptr);
      INFO(image.name << ": " << Describe(c, 64, 64, false));
      CHECK(MeanAbsError(a, f) < 1.0);
      differs |= a != f;
    }
    INFO(image.name);
    CHECK(differs);  // the option really changes the IDCT
  }
}

TEST_CASE("EachDctScaleIsChosenWhenTheCropAllowsIt") {
  const std::string jpeg = TexturedJpeg(640, 480, {2, 2});
  const Image full = FullDecode(jpeg);
  JpegRoiDecoder decoder;
  struct Case {
    CropWindow crop;
    int out_width, out_height, denom;
  };
  const std::vector<Case> cases = {
      {{0, 0, 640, 480}, 60, 60, 8},     {{0, 0, 640, 480}, 60, 61, 4},
      {{0, 0, 640, 480}, 100, 100, 4},   {{0, 0, 640, 480}, 200, 200, 2},
      {{0, 0, 640, 480}, 300, 300, 1},   {{13, 7, 611, 470}, 57, 50, 8},
      {{101, 53, 333, 277}, 80, 64, 4},  {{37, 29, 251, 250}, 125, 125, 2},
      {{37, 29, 251, 250}, 126, 125, 1}, {{600, 440, 40, 40}, 5, 5, 8},
  };
  for (const Case& k : cases) {
    for (bool flip : {false, true}) {
      RoiDecodeStats stats;
      const auto got = Decode(decoder, jpeg, k.crop, k.out_width, k.out_height, flip, &stats);
      INFO(Describe(k.crop, k.out_width, k.out_height, flip));
      CHECK(stats.scale_denom == k.denom);
      CHECK(stats.rows_total == (480 + k.denom - 1) / k.denom);
      CHECK(MeanAbsError(got, Reference(full, k.crop, k.out_width, k.out_height, flip)) < 2.5);
    }
  }
}

// A gray ramp whose value is the coordinate along one axis: each output pixel then reads back the
// source position it was resampled from.
std::string RampJpeg(int width, int height, bool along_x) {
  return MakeTestJpeg(
      TestJpegKind::kGray, width, height,
      [along_x](int x, int y, int) { return static_cast<uint8_t>(along_x ? x : y); }, false, 100);
}

TEST_CASE("DctScaledWindowIsWithinHalfAScaledPixelOfTheCrop") {
  // Output column i comes from around crop.x + (i + 0.5) * crop.width / out_width in a full
  // decode. At 1/d the window's edges move by at most d / 2 source pixels, so every sample does
  // too (plus a little for the ramp's JPEG error and the resize's rounding).
  for (bool along_x : {true, false}) {
    const int w = along_x ? 250 : 200, h = along_x ? 200 : 250;
    const std::string jpeg = RampJpeg(w, h, along_x);
    const Image full = FullDecode(jpeg);
    JpegRoiDecoder decoder;
    int scales_seen = 0;
    for (uint64_t stream = 0; stream < 200; ++stream) {
      AugmentRng rng(31, stream);
      const CropWindow c = RandomResizedCrop(w, h, {0.1, 1.0}, rng);
      const int size = 4 + static_cast<int>(rng.NextU64() % 40);
      RoiDecodeStats stats;
      const auto got = Decode(decoder, jpeg, c, size, size, false, &stats);
      const auto want = Reference(full, c, size, size, false);
      scales_seen |= stats.scale_denom;
      INFO((along_x ? "x: " : "y: ")
           << Describe(c, size, size, false) << " at 1/" << stats.scale_denom);
      CHECK(MaxAbsError(got, want) <= stats.scale_denom / 2 + 1);
    }
    CHECK(scales_seen == (1 | 2 | 4 | 8));
  }
}

TEST_CASE("ScaleNeverTakesTheCropBelowTheOutputSize") {
  const std::string jpeg = TexturedJpeg(640, 480, {2, 2});
  JpegRoiDecoder decoder;
  for (uint64_t stream = 0; stream < 200; ++stream) {
    AugmentRng rng(2, stream);
    const CropWindow c = RandomResizedCrop(640, 480, {}, rng);
    const int ow = 8 + static_cast<int>(rng.NextU64() % 200);
    const int oh = 8 + static_cast<int>(rng.NextU64() % 200);
    RoiDecodeStats stats;
    Decode(decoder, jpeg, c, ow, oh, false, &stats);
    const int d = stats.scale_denom;
    INFO(Describe(c, ow, oh, false) << " at 1/" << d);
    // Full scale is the floor: a crop smaller than the output is enlarged by the resize.
    if (d > 1) {
      CHECK(c.width >= ow * d);
      CHECK(c.height >= oh * d);
    }
    // And it is the largest such denominator.
    CHECK((d == 8 || c.width < ow * 2 * d || c.height < oh * 2 * d));
  }
}

TEST_CASE("AtFullScaleTheCropHasExactlyTheFullDecodesPixels") {
  // Same IDCT, upsampling and colour conversion on the same blocks: when the output is the crop's
  // own size, the fused decode is the full decode's window, bit for bit — including at the edges
  // of 4:2:0 and 4:2:2 crops, where the fancy upsampler would otherwise see a false image edge.
  JpegRoiDecoder decoder;
  for (const TestImage& image : TestImages()) {
    const Image full = FullDecode(image.jpeg);
    for (uint64_t stream = 0; stream < 24; ++stream) {
      AugmentRng rng(21, stream);
      const CropWindow c = RandomResizedCrop(full.width, full.height, {0.01, 0.5}, rng);
      RoiDecodeStats stats;
      const auto got = Decode(decoder, image.jpeg, c, c.width, c.height, false, &stats);
      INFO(image.name << ": " << Describe(c, c.width, c.height, false));
      REQUIRE(stats.scale_denom == 1);
      CHECK(MaxAbsError(got, Reference(full, c, c.width, c.height, false)) == 0);
    }
  }
}

TEST_CASE("OnePixelWindowsMatchTheFullDecode") {
  JpegRoiDecoder decoder;
  for (const TestImage& image : TestImages()) {
    const Image full = FullDecode(image.jpeg);
    const int w = full.width, h = full.height;
    const std::vector<CropWindow> windows = {
        {0, 0, 1, 1},         {w - 1, 0, 1, 1}, {0, h - 1, 1, 1}, {w - 1, h - 1, 1, 1},
        {w / 2, h / 2, 1, 1}, {15, 16, 1, 1},   {16, 15, 1, 1},   {w - 17, 8, 1, 1},
        {w / 3, 0, 1, h},     {0, h / 3, w, 1},
    };
    for (const CropWindow& c : windows) {
      for (const auto& [ow, oh] : {std::pair{1, 1}, {3, 3}, {2, 5}}) {
        const auto got = Decode(decoder, image.jpeg, c, ow, oh, false);
        INFO(image.name << ": " << Describe(c, ow, oh, false));
        CHECK(MaxAbsError(got, Reference(full, c, ow, oh, false)) <= 1);
      }
    }
  }
}

TEST_CASE("FullImageAtItsOwnSizeIsExactlyTheFullDecode") {
  JpegRoiDecoder decoder;
  for (const TestImage& image : TestImages()) {
    const Image full = FullDecode(image.jpeg);
    RoiDecodeStats stats;
    const auto got = Decode(decoder, image.jpeg, {0, 0, full.width, full.height}, full.width,
                            full.height, false, &stats);
    INFO(image.name);
    CHECK(got == full.pixels);
    CHECK(stats.scale_denom == 1);
    CHECK(stats.rows_decoded == full.height);
    CHECK(stats.rows_total == full.height);
  }
}

TEST_CASE("CropInTheUpperPartStopsDecodingAfterItsLastRow") {
  JpegRoiDecoder decoder;
  for (const TestImage& image : TestImages()) {
    const Image full = FullDecode(image.jpeg);
    const int w = full.width, h = full.height;
    for (int denom_target : {1, 2, 4, 8}) {
      // A band across the top quarter; an output small enough to allow the scale.
      const CropWindow c{0, 0, w, h / 4};
      const int ow = std::max(1, w / denom_target), oh = std::max(1, (h / 4) / denom_target);
      RoiDecodeStats stats;
      const auto got = Decode(decoder, image.jpeg, c, ow, oh, false, &stats);
      INFO(image.name << ": " << Describe(c, ow, oh, false) << " at 1/" << stats.scale_denom);
      CHECK(stats.rows_decoded < stats.rows_total);
      CHECK(stats.rows_decoded <= (h / 4 + stats.scale_denom - 1) / stats.scale_denom + 1);
      CHECK(MeanAbsError(got, Reference(full, c, ow, oh, false)) < 2.5);
    }
    // A crop touching the bottom goes through every row (but a last scaled row that holds under
    // half a scaled pixel of the image, which the crop rounds away).
    RoiDecodeStats stats;
    Decode(decoder, image.jpeg, {w / 4, h / 2, w / 2, h - h / 2}, 8, 8, false, &stats);
    CHECK(stats.rows_decoded >= stats.rows_total - 1);
    CHECK(stats.rows_decoded * stats.scale_denom * 2 >= h * 2 - stats.scale_denom);
  }
}

TEST_CASE("FlipMirrorsTheOutputExactly") {
  const std::string jpeg = TexturedJpeg(333, 251, {2, 2});
  JpegRoiDecoder decoder;
  const CropWindow c{31, 17, 200, 150};
  const auto plain = Decode(decoder, jpeg, c, 64, 48, false);
  const auto flipped = Decode(decoder, jpeg, c, 64, 48, true);
  for (int y = 0; y < 48; ++y) {
    for (int x = 0; x < 64; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        REQUIRE(flipped[(y * 64 + x) * 3 + ch] == plain[(y * 64 + (63 - x)) * 3 + ch]);
      }
    }
  }
}

TEST_CASE("OutputStrideLeavesTheRowPaddingUntouched") {
  const std::string jpeg = TexturedJpeg(333, 251, {2, 2});
  JpegRoiDecoder decoder;
  const CropWindow c{10, 20, 300, 200};
  const auto packed = Decode(decoder, jpeg, c, 40, 30, true);
  constexpr size_t kStride = 40 * 3 + 7;
  std::vector<uint8_t> padded(kStride * 30, 0xAB);
  REQUIRE(decoder.DecodeCrop(jpeg, c, 40, 30, true, padded.data(), kStride).ok());
  for (int y = 0; y < 30; ++y) {
    for (size_t i = 0; i < kStride; ++i) {
      const uint8_t want = i < 120 ? packed[y * 120 + i] : 0xAB;
      REQUIRE(padded[y * kStride + i] == want);
    }
  }
}

TEST_CASE("SameInputGivesTheSameBytesAcrossDecoders") {
  const std::string jpeg = TexturedJpeg(301, 217, {2, 2}, true);
  JpegRoiDecoder a, b;
  for (uint64_t stream = 0; stream < 20; ++stream) {
    AugmentRng rng(9, stream);
    const CropWindow c = RandomResizedCrop(301, 217, {}, rng);
    CHECK(Decode(a, jpeg, c, 32, 32, false) == Decode(b, jpeg, c, 32, 32, false));
  }
}

TEST_CASE("ReadHeaderReportsSizeColourSpaceAndProgression") {
  JpegRoiDecoder decoder;
  struct Case {
    std::string jpeg;
    int width, height, components;
    JpegColorSpace color_space;
    bool progressive;
  };
  const std::vector<Case> cases = {
      {TexturedJpeg(333, 251, {2, 2}), 333, 251, 3, JpegColorSpace::kYCbCr, false},
      {TexturedJpeg(129, 97, {1, 1}, true), 129, 97, 3, JpegColorSpace::kYCbCr, true},
      {TexturedGrayJpeg(257, 129), 257, 129, 1, JpegColorSpace::kGray, false},
      {TexturedCmykJpeg(TestJpegKind::kCmyk, 20, 10), 20, 10, 4, JpegColorSpace::kCMYK, false},
      {TexturedCmykJpeg(TestJpegKind::kYcck, 20, 10), 20, 10, 4, JpegColorSpace::kYCCK, false},
  };
  for (const Case& k : cases) {
    const Result<JpegHeader> header = decoder.ReadHeader(k.jpeg);
    REQUIRE(header.ok());
    CHECK(header->width == k.width);
    CHECK(header->height == k.height);
    CHECK(header->components == k.components);
    CHECK(header->color_space == k.color_space);
    CHECK(header->progressive == k.progressive);
  }
}

}  // namespace
}  // namespace sluice

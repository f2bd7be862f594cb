#include "formats/jpeg_roi_decoder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

// clang-format off
// jpeglib.h uses FILE and size_t without declaring them: <cstdio> must come first.
#include <jpeglib.h>
// clang-format on

#include "formats/crop_window.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "tests/jpeg_test_images.h"

namespace sluice {
namespace {

using testing::MakeTestJpeg;
using testing::TestJpegKind;

// Gradients with slow waves, different in each channel. At most about 0.4 levels per pixel in
// any direction: a DCT-scaled decode places the crop's edges within half a scaled pixel (up to 4
// source pixels at 1/8) of where a full decode would, which on such content stays well inside the
// comparison's tolerance. DctScaledWindowIsWithinHalfAScaledPixelOfTheCrop pins the placement.
uint8_t Textured(int x, int y, int ch) {
  constexpr double kTwoPi = 6.283185307179586;
  double v = 0;
  switch (ch) {
    case 0:
      v = 60 + 0.15 * x + 15 * std::sin(y * kTwoPi / 400);
      break;
    case 1:
      v = 50 + 0.15 * y + 15 * std::cos(x * kTwoPi / 500);
      break;
    default:
      v = 128 + 40 * std::sin((x + y) * kTwoPi / 1000);
      break;
  }
  return static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
}

// Luma sampling factors (chroma is 1x1): 2x2 is 4:2:0, 1x1 4:4:4, 2x1 4:2:2, 1x2 4:4:0.
struct Sampling {
  int h = 2;
  int v = 2;
};

// A YCbCr JPEG of pixel(x, y, channel) with the given chroma subsampling, written with libjpeg
// directly (MakeTestJpeg always uses libjpeg's default 4:2:0).
template <typename PixelFn>
std::string EncodeYCbCr(int width, int height, PixelFn pixel, Sampling sampling,
                        bool progressive = false, int quality = 95) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = width;
  c.image_height = height;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  c.comp_info[0].h_samp_factor = sampling.h;
  c.comp_info[0].v_samp_factor = sampling.v;
  for (int i = 1; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width) * 3);
  while (c.next_scanline < c.image_height) {
    const int y = static_cast<int>(c.next_scanline);
    for (int x = 0; x < width; ++x) {
      for (int ch = 0; ch < 3; ++ch) row[x * 3 + ch] = pixel(x, y, ch);
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

std::string TexturedJpeg(int width, int height, Sampling sampling, bool progressive = false) {
  return EncodeYCbCr(
      width, height, [](int x, int y, int ch) { return Textured(x, y, ch); }, sampling,
      progressive);
}

std::string TexturedGrayJpeg(int width, int height, bool progressive = false) {
  return MakeTestJpeg(
      TestJpegKind::kGray, width, height, [](int x, int y, int) { return Textured(x, y, 0); },
      progressive);
}

// Inverted CMYK (255 = no ink) of the textured colours with a little black.
std::string TexturedCmykJpeg(TestJpegKind kind, int width, int height, bool progressive = false) {
  return MakeTestJpeg(
      kind, width, height,
      [](int x, int y, int ch) -> uint8_t { return ch == 3 ? 230 : Textured(x, y, ch); },
      progressive);
}

struct TestImage {
  std::string name;
  std::string jpeg;
};

// Every colour space and sampling, baseline and progressive, sizes that are not multiples of the
// 8- or 16-pixel MCU.
const std::vector<TestImage>& TestImages() {
  static const auto* images = new std::vector<TestImage>{
      {"4:2:0 333x251", TexturedJpeg(333, 251, {2, 2})},
      {"4:4:4 333x251", TexturedJpeg(333, 251, {1, 1})},
      {"4:2:2 250x190", TexturedJpeg(250, 190, {2, 1})},
      {"4:4:0 190x250", TexturedJpeg(190, 250, {1, 2})},
      {"4:2:0 640x480", TexturedJpeg(640, 480, {2, 2})},
      {"progressive 4:2:0 301x217", TexturedJpeg(301, 217, {2, 2}, true)},
      {"progressive 4:4:4 129x97", TexturedJpeg(129, 97, {1, 1}, true)},
      {"gray 257x129", TexturedGrayJpeg(257, 129)},
      {"progressive gray 100x75", TexturedGrayJpeg(100, 75, true)},
      {"CMYK 203x157", TexturedCmykJpeg(TestJpegKind::kCmyk, 203, 157)},
      {"progressive YCCK 203x157", TexturedCmykJpeg(TestJpegKind::kYcck, 203, 157, true)},
  };
  return *images;
}

Image FullDecode(const std::string& jpeg) {
  JpegDecoder decoder;
  Image image;
  REQUIRE(decoder.Decode(jpeg, &image).ok());
  return image;
}

// What the fused decode stands in for: full decode, crop, resize, flip.
std::vector<uint8_t> Reference(const Image& full, const CropWindow& c, int out_width,
                               int out_height, bool flip) {
  std::vector<uint8_t> out(static_cast<size_t>(out_width) * out_height * 3);
  Resize(full.view().Crop(c.x, c.y, c.width, c.height), out.data(), out_width, out_height,
         static_cast<size_t>(out_width) * 3);
  if (flip) FlipHorizontal(out.data(), out_width, out_height, static_cast<size_t>(out_width) * 3);
  return out;
}

std::vector<uint8_t> Decode(JpegRoiDecoder& decoder, const std::string& jpeg, const CropWindow& c,
                            int out_width, int out_height, bool flip,
                            RoiDecodeStats* stats = nullptr) {
  std::vector<uint8_t> out(static_cast<size_t>(out_width) * out_height * 3);
  const Status s = decoder.DecodeCrop(jpeg, c, out_width, out_height, flip, out.data(),
                                      static_cast<size_t>(out_width) * 3, kDefaultMaxPixels, stats);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return out;
}

double MeanAbsError(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

int MaxAbsError(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  int worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(int{a[i]} - int{b[i]}));
  return worst;
}

std::string Describe(const CropWindow& c, int ow, int oh, bool flip) {
  return std::to_string(c.width) + "x" + std::to_string(c.height) + "+" + std::to_string(c.x) +
         "+" + std::to_string(c.y) + " -> " + std::to_string(ow) + "x" + std::to_string(oh) +
         (flip ? " flipped" : "");
}

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

TEST_CASE("ImageOverMaxPixelsIsRefusedBeforeDecoding") {
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(8 * 8 * 3, 0x5A);
  // A header claiming 65000x65000 over a few hundred bytes of data: decoding it would allocate
  // for 4.2 gigapixels. It must be refused from the header, naming both numbers.
  const std::string huge = testing::WithFrameSize(TexturedJpeg(16, 16, {2, 2}), 65000, 65000);
  Status s = decoder.DecodeCrop(huge, {0, 0, 64, 64}, 8, 8, false, out.data(), 24);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("65000x65000") && Catch::Contains("4225000000") &&
                              Catch::Contains(std::to_string(kDefaultMaxPixels)));
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0x5A; }));
  const Result<JpegHeader> header = decoder.ReadHeader(huge);
  CHECK(header.status().code() == StatusCode::kInvalidArgument);

  // The limit is inclusive.
  const std::string jpeg = TexturedJpeg(40, 30, {2, 2});
  s = decoder.DecodeCrop(jpeg, {0, 0, 40, 30}, 8, 8, false, out.data(), 24, 40 * 30 - 1);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("1200") && Catch::Contains("1199"));
  CHECK(decoder.ReadHeader(jpeg, 40 * 30 - 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, {0, 0, 40, 30}, 8, 8, false, out.data(), 24, 40 * 30).ok());
  CHECK(decoder.ReadHeader(jpeg, 40 * 30).ok());
}

TEST_CASE("CropOutsideTheImageOrBadOutputIsInvalidArgument") {
  const std::string jpeg = TexturedJpeg(40, 30, {2, 2});
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(16 * 16 * 3);
  for (const CropWindow& c :
       {CropWindow{-1, 0, 10, 10}, CropWindow{0, -1, 10, 10}, CropWindow{31, 0, 10, 10},
        CropWindow{0, 21, 10, 10}, CropWindow{0, 0, 0, 10}, CropWindow{0, 0, 10, 0},
        CropWindow{0, 0, 41, 30}, CropWindow{0, 0, 40, 31}}) {
    INFO(Describe(c, 16, 16, false));
    const Status s = decoder.DecodeCrop(jpeg, c, 16, 16, false, out.data(), 48);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("40x30"));
  }
  const CropWindow whole{0, 0, 40, 30};
  CHECK(decoder.DecodeCrop(jpeg, whole, 0, 16, false, out.data(), 48).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 0, false, out.data(), 48).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 16, false, out.data(), 47).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 16, false, nullptr, 48).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 16, false, out.data(), 48).ok());
}

// Noise makes the entropy-coded data long and spread evenly over the rows, so a cut at a given
// fraction of the bytes lands near the same fraction of the rows.
std::string NoisyJpeg(int width, int height, bool progressive) {
  std::mt19937 rng(7);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  for (auto& v : pixels) v = static_cast<uint8_t>(rng());
  return EncodeYCbCr(
      width, height,
      [&](int x, int y, int ch) { return pixels[(static_cast<size_t>(y) * width + x) * 3 + ch]; },
      {2, 2}, progressive, 90);
}

TEST_CASE("CorruptOrTruncatedDataIsAStatusNotACrash") {
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(32 * 32 * 3);
  auto decode = [&](std::string_view data, const CropWindow& c) {
    return decoder.DecodeCrop(data, c, 32, 32, false, out.data(), 96);
  };
  const CropWindow small{0, 0, 16, 16};
  CHECK(decode("", small).code() == StatusCode::kInvalidArgument);
  CHECK(decode("not a jpeg at all", small).code() == StatusCode::kInvalidArgument);
  CHECK_THAT(decode("\x89PNG\r\n\x1a\n0000000000000000", small).message(), Catch::Contains("PNG"));
  CHECK(decode(std::string_view("\xFF\xD8", 2), small).code() == StatusCode::kInvalidArgument);

  for (bool progressive : {false, true}) {
    const std::string jpeg = NoisyJpeg(256, 192, progressive);
    // Cut inside the header, and inside the entropy data with the crop reaching the bottom.
    for (size_t cut : {size_t{10}, size_t{100}, jpeg.size() / 3, jpeg.size() * 2 / 3}) {
      INFO((progressive ? "progressive" : "baseline")
           << " cut at " << cut << " of " << jpeg.size());
      const Status s = decode(std::string_view(jpeg).substr(0, cut), {0, 96, 256, 96});
      CHECK(s.code() == StatusCode::kInvalidArgument);
    }
  }

  // Flipped bytes anywhere: libjpeg patches what it can; whatever happens, a Status comes back.
  const std::string jpeg = TexturedJpeg(129, 97, {2, 2});
  std::mt19937 rng(3);
  int failures = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = jpeg;
    for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    const Result<JpegHeader> header = decoder.ReadHeader(bad);
    if (!header.ok()) {
      ++failures;
      continue;
    }
    const CropWindow c{0, 0, std::min(header->width, 64), std::min(header->height, 64)};
    if (!decoder.DecodeCrop(bad, c, 32, 32, i % 2 == 0, out.data(), 96).ok()) ++failures;
  }
  CHECK(failures > 0);
}

TEST_CASE("TruncatedBelowTheCropStillDecodesTheCropExactly") {
  // Decoding stops after the crop's last row, so bytes past it are never needed: a baseline file
  // cut in its lower half gives the same crop of its upper rows as the complete file.
  const std::string jpeg = NoisyJpeg(256, 192, false);
  const std::string cut = jpeg.substr(0, jpeg.size() * 6 / 10);
  JpegRoiDecoder decoder;
  const CropWindow c{40, 8, 150, 40};
  const auto whole = Decode(decoder, jpeg, c, 150, 40, false);
  CHECK(Decode(decoder, cut, c, 150, 40, false) == whole);
}

TEST_CASE("DecoderIsReusableAfterEveryKindOfError") {
  const std::string good = TexturedJpeg(301, 217, {2, 2});
  const std::string noisy = NoisyJpeg(256, 192, false);
  const CropWindow c{20, 30, 200, 150};
  JpegRoiDecoder fresh;
  const auto want = Decode(fresh, good, c, 50, 40, true);

  JpegRoiDecoder reused;
  std::vector<uint8_t> out(50 * 40 * 3);
  auto decode_good = [&] { return Decode(reused, good, c, 50, 40, true); };
  CHECK(!reused.DecodeCrop("garbage", c, 50, 40, true, out.data(), 150).ok());
  CHECK(decode_good() == want);
  CHECK(!reused
             .DecodeCrop(noisy.substr(0, noisy.size() / 2), {0, 0, 256, 192}, 50, 40, true,
                         out.data(), 150)
             .ok());
  CHECK(decode_good() == want);
  CHECK(!reused.DecodeCrop(good, c, 50, 40, true, out.data(), 150, 1000).ok());
  CHECK(decode_good() == want);
  CHECK(!reused.DecodeCrop(good, {0, 0, 302, 10}, 50, 40, true, out.data(), 150).ok());
  CHECK(decode_good() == want);
  CHECK(!reused.ReadHeader(testing::WithFrameSize(good, 65000, 65000)).ok());
  CHECK(decode_good() == want);
  // A header read leaves nothing behind either.
  CHECK(reused.ReadHeader(noisy).ok());
  CHECK(decode_good() == want);
}

}  // namespace
}  // namespace sluice

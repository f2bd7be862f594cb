#include "formats/jpeg_codec.h"

#include <unistd.h>

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

#include "formats/jpeg_header.h"
#include "tests/jpeg_test_images.h"

namespace sluice {
namespace {

using testing::EncodeWithLibjpeg;
using testing::LibjpegSpec;

// A smooth RGB image: gradients with a gentle wave, what JPEG compresses well.
std::vector<uint8_t> SmoothRgb(int width, int height) {
  std::vector<uint8_t> p(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* px = &p[(static_cast<size_t>(y) * width + x) * 3];
      px[0] = static_cast<uint8_t>(255 * x / (width - 1));
      px[1] = static_cast<uint8_t>(255 * y / (height - 1));
      px[2] = static_cast<uint8_t>(128 + 100 * std::sin((x + y) * 0.05));
    }
  }
  return p;
}

// Noisy RGB, so the entropy-coded data is long and a truncation lands well inside the scan.
std::vector<uint8_t> NoisyRgb(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> p(static_cast<size_t>(width) * height * 3);
  for (auto& v : p) v = static_cast<uint8_t>(rng());
  return p;
}

double MeanAbsError(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

const uint8_t* Pixel(const Image& img, int x, int y) {
  return &img.pixels[(static_cast<size_t>(y) * img.width + x) * 3];
}

void RequireRgbNear(const Image& img, int x, int y, int r, int g, int b, int tol) {
  const uint8_t* p = Pixel(img, x, y);
  INFO("pixel (" << x << "," << y << ") = " << int{p[0]} << "," << int{p[1]} << "," << int{p[2]}
                 << " expected " << r << "," << g << "," << b);
  REQUIRE(std::abs(p[0] - r) <= tol);
  REQUIRE(std::abs(p[1] - g) <= tol);
  REQUIRE(std::abs(p[2] - b) <= tol);
}

// Four 16x16 patches of inverted CMYK (Adobe's convention: 255 = no ink), left to right: cyan,
// magenta, yellow, white; libjpeg marks CMYK and YCCK files with an Adobe APP14 marker.
std::vector<uint8_t> InvertedCmykPatches() {
  const uint8_t kPatches[4][4] = {
      {0, 255, 255, 255}, {255, 0, 255, 255}, {255, 255, 0, 255}, {255, 255, 255, 255}};
  std::vector<uint8_t> p(64 * 16 * 4);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 64; ++x) {
      for (int c = 0; c < 4; ++c) p[(y * 64 + x) * 4 + c] = kPatches[x / 16][c];
    }
  }
  return p;
}

void RequireCmykPatchesDecoded(const Image& img) {
  REQUIRE(img.width == 64);
  REQUIRE(img.height == 16);
  RequireRgbNear(img, 8, 8, 0, 255, 255, 6);
  RequireRgbNear(img, 24, 8, 255, 0, 255, 6);
  RequireRgbNear(img, 40, 8, 255, 255, 0, 6);
  RequireRgbNear(img, 56, 8, 255, 255, 255, 6);
}

TEST_CASE("SmoothImageRoundTripsWithinSmallError") {
  const int w = 96, h = 64;
  const std::vector<uint8_t> src = SmoothRgb(w, h);
  const ImageView view{src.data(), w, h, static_cast<size_t>(w) * 3};
  for (bool s420 : {true, false}) {
    JpegEncoder encoder;
    std::string jpeg;
    REQUIRE(encoder.Encode(view, JpegEncodeOptions{95, s420}, &jpeg).ok());
    JpegDecoder decoder;
    Image img;
    REQUIRE(decoder.Decode(jpeg, &img).ok());
    REQUIRE(img.width == w);
    REQUIRE(img.height == h);
    INFO("subsample_420 " << s420);
    REQUIRE(MeanAbsError(img.pixels, src) < 2.0);
  }
}

TEST_CASE("EncoderWritesRequestedChromaSubsampling") {
  const std::vector<uint8_t> src = SmoothRgb(32, 32);
  for (bool s420 : {true, false}) {
    std::string jpeg;
    JpegEncoder encoder;
    REQUIRE(encoder.Encode({src.data(), 32, 32, 96}, {90, s420}, &jpeg).ok());
    jpeg_decompress_struct d;
    jpeg_error_mgr err;
    d.err = jpeg_std_error(&err);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size());
    jpeg_read_header(&d, TRUE);
    CHECK(d.comp_info[0].h_samp_factor == (s420 ? 2 : 1));
    CHECK(d.comp_info[0].v_samp_factor == (s420 ? 2 : 1));
    CHECK(d.comp_info[1].h_samp_factor == 1);
    CHECK(d.progressive_mode == FALSE);
    jpeg_destroy_decompress(&d);
  }
}

TEST_CASE("EncoderAppendsAndHonoursStride") {
  // A 20x10 window of a 50x30 image: the encoder must step rows by the parent's stride.
  const std::vector<uint8_t> big = SmoothRgb(50, 30);
  const ImageView parent{big.data(), 50, 30, 150};
  const ImageView crop = parent.Crop(13, 7, 20, 10);
  std::string out = "prefix";
  JpegEncoder encoder;
  REQUIRE(encoder.Encode(crop, {100, false}, &out).ok());
  REQUIRE(out.compare(0, 6, "prefix") == 0);
  Image img;
  JpegDecoder decoder;
  REQUIRE(decoder.Decode(std::string_view(out).substr(6), &img).ok());
  std::vector<uint8_t> expected;
  for (int y = 0; y < 10; ++y) expected.insert(expected.end(), crop.row(y), crop.row(y) + 60);
  REQUIRE(MeanAbsError(img.pixels, expected) < 1.5);
}

TEST_CASE("EncoderRejectsBadQualityAndEmptyImage") {
  const std::vector<uint8_t> src(3 * 4 * 4, 100);
  JpegEncoder encoder;
  std::string out;
  CHECK(encoder.Encode({src.data(), 4, 4, 12}, {0, true}, &out).code() ==
        StatusCode::kInvalidArgument);
  CHECK(encoder.Encode({src.data(), 4, 4, 12}, {101, true}, &out).code() ==
        StatusCode::kInvalidArgument);
  CHECK(encoder.Encode({src.data(), 0, 4, 12}, {90, true}, &out).code() ==
        StatusCode::kInvalidArgument);
  CHECK(encoder.Encode({src.data(), 4, 4, 6}, {90, true}, &out).code() ==
        StatusCode::kInvalidArgument);
  CHECK(out.empty());
  REQUIRE(encoder.Encode({src.data(), 4, 4, 12}, {1, true}, &out).ok());
}

TEST_CASE("GrayJpegDecodesToEqualChannels") {
  const int w = 40, h = 24;
  std::vector<uint8_t> gray(w * h);
  for (int i = 0; i < w * h; ++i) gray[i] = static_cast<uint8_t>((i * 7) % 256);
  const std::string jpeg =
      EncodeWithLibjpeg(gray, w, h, {JCS_GRAYSCALE, JCS_GRAYSCALE, false, 100});
  JpegDecoder decoder;
  Image img;
  REQUIRE(decoder.Decode(jpeg, &img).ok());
  REQUIRE(img.width == w);
  REQUIRE(img.height == h);
  double err = 0;
  for (int i = 0; i < w * h; ++i) {
    const uint8_t* p = &img.pixels[i * 3];
    REQUIRE(p[0] == p[1]);
    REQUIRE(p[1] == p[2]);
    err += std::abs(p[0] - gray[i]);
  }
  REQUIRE(err / (w * h) < 3.0);
}

TEST_CASE("CmykJpegDecodesToRgb") {
  const std::string jpeg =
      EncodeWithLibjpeg(InvertedCmykPatches(), 64, 16, {JCS_CMYK, JCS_CMYK, false, 95});
  auto header = ReadJpegHeader(jpeg);
  REQUIRE(header.ok());
  REQUIRE(header->color_space == JpegColorSpace::kCMYK);
  JpegDecoder decoder;
  Image img;
  REQUIRE(decoder.Decode(jpeg, &img).ok());
  RequireCmykPatchesDecoded(img);
}

TEST_CASE("YcckJpegDecodesToRgb") {
  const std::string jpeg =
      EncodeWithLibjpeg(InvertedCmykPatches(), 64, 16, {JCS_CMYK, JCS_YCCK, false, 95});
  auto header = ReadJpegHeader(jpeg);
  REQUIRE(header.ok());
  REQUIRE(header->color_space == JpegColorSpace::kYCCK);
  JpegDecoder decoder;
  Image img;
  REQUIRE(decoder.Decode(jpeg, &img).ok());
  RequireCmykPatchesDecoded(img);
}

TEST_CASE("RgbColorspaceJpegDecodes") {
  const int w = 48, h = 32;
  const std::vector<uint8_t> src = SmoothRgb(w, h);
  const std::string jpeg = EncodeWithLibjpeg(src, w, h, {JCS_RGB, JCS_RGB, false, 95});
  auto header = ReadJpegHeader(jpeg);
  REQUIRE(header.ok());
  REQUIRE(header->color_space == JpegColorSpace::kRGB);
  JpegDecoder decoder;
  Image img;
  REQUIRE(decoder.Decode(jpeg, &img).ok());
  REQUIRE(MeanAbsError(img.pixels, src) < 2.0);
}

TEST_CASE("ProgressiveJpegDecodes") {
  const int w = 70, h = 45;  // not a multiple of the MCU size
  const std::vector<uint8_t> src = SmoothRgb(w, h);
  const std::string jpeg = EncodeWithLibjpeg(src, w, h, {JCS_RGB, JCS_YCbCr, true, 95});
  auto header = ReadJpegHeader(jpeg);
  REQUIRE(header.ok());
  REQUIRE(header->progressive);
  JpegDecoder decoder;
  Image img;
  REQUIRE(decoder.Decode(jpeg, &img).ok());
  REQUIRE(img.width == w);
  REQUIRE(img.height == h);
  REQUIRE(MeanAbsError(img.pixels, src) < 2.5);
}

TEST_CASE("ProgressiveGrayAndCmykJpegsDecode") {
  std::vector<uint8_t> gray(32 * 32, 77);
  JpegDecoder decoder;
  Image img;
  REQUIRE(
      decoder
          .Decode(EncodeWithLibjpeg(gray, 32, 32, {JCS_GRAYSCALE, JCS_GRAYSCALE, true, 90}), &img)
          .ok());
  RequireRgbNear(img, 5, 5, 77, 77, 77, 1);
  REQUIRE(
      decoder
          .Decode(EncodeWithLibjpeg(InvertedCmykPatches(), 64, 16, {JCS_CMYK, JCS_YCCK, true, 95}),
                  &img)
          .ok());
  RequireCmykPatchesDecoded(img);
}

TEST_CASE("TruncatedInScanIsRefused") {
  // Cut mid-way through the entropy-coded data: half of a baseline file, a third of a progressive
  // one (inside its fifth scan, several MCU rows before that scan's end).
  for (bool progressive : {false, true}) {
    const std::string data = EncodeWithLibjpeg(NoisyRgb(128, 128, progressive ? 2 : 1), 128, 128,
                                               {JCS_RGB, JCS_YCbCr, progressive, 90});
    const size_t cut = progressive ? data.size() / 3 : data.size() / 2;
    JpegDecoder decoder;
    Image img;
    const Status s = decoder.Decode(std::string_view(data).substr(0, cut), &img);
    INFO("progressive " << progressive << ": " << s.ToString());
    REQUIRE(s.code() == StatusCode::kInvalidArgument);
    REQUIRE(s.message() == "invalid JPEG: Premature end of JPEG file");
  }
}

TEST_CASE("MissingEoiMarkerIsAccepted") {
  const std::vector<uint8_t> src = SmoothRgb(64, 64);
  std::string jpeg = EncodeWithLibjpeg(src, 64, 64, {JCS_RGB, JCS_YCbCr, false, 95});
  REQUIRE(jpeg.substr(jpeg.size() - 2) == "\xFF\xD9");
  jpeg.resize(jpeg.size() - 2);
  JpegDecoder decoder;
  Image img;
  REQUIRE(decoder.Decode(jpeg, &img).ok());
  REQUIRE(MeanAbsError(img.pixels, src) < 2.0);
}

TEST_CASE("EveryTruncationReturnsAStatus") {
  // Each prefix of a small image, baseline and progressive, sits in its own exactly-sized buffer
  // so reading past its end would be caught by sanitizers.
  for (bool progressive : {false, true}) {
    const std::string jpeg =
        EncodeWithLibjpeg(NoisyRgb(24, 20, 3), 24, 20, {JCS_RGB, JCS_YCbCr, progressive, 80});
    JpegDecoder decoder;
    Image img;
    int ok = 0;
    for (size_t n = 0; n <= jpeg.size(); ++n) {
      std::vector<char> prefix(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(n));
      const Status s = decoder.Decode(std::string_view(prefix.data(), n), &img);
      if (s.ok()) {
        ++ok;
      } else {
        REQUIRE(s.code() == StatusCode::kInvalidArgument);
      }
    }
    REQUIRE(ok >= 1);                                 // the whole file, at least
    REQUIRE(ok < static_cast<int>(jpeg.size()) / 2);  // most truncations are refused
  }
}

TEST_CASE("GarbageBytesNeverCrash") {
  const std::string jpeg =
      EncodeWithLibjpeg(NoisyRgb(64, 48, 4), 64, 48, {JCS_RGB, JCS_YCbCr, false, 90});
  const std::string progressive =
      EncodeWithLibjpeg(NoisyRgb(64, 48, 5), 64, 48, {JCS_RGB, JCS_YCbCr, true, 90});
  std::mt19937 rng(42);
  JpegDecoder decoder;
  Image img;
  for (int trial = 0; trial < 300; ++trial) {
    std::string data = trial % 2 ? progressive : jpeg;
    // Overwrite a few runs of bytes anywhere after SOI, markers and scans alike.
    const int runs = 1 + static_cast<int>(rng() % 4);
    for (int r = 0; r < runs; ++r) {
      const size_t at = 2 + rng() % (data.size() - 2);
      const size_t len = 1 + rng() % 16;
      for (size_t i = at; i < data.size() && i < at + len; ++i) data[i] = static_cast<char>(rng());
    }
    const Status s = decoder.Decode(data, &img);
    if (!s.ok()) REQUIRE(s.code() == StatusCode::kInvalidArgument);
  }
  std::string noise(5000, '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  noise[0] = '\xFF';
  noise[1] = '\xD8';
  REQUIRE(decoder.Decode(noise, &img).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ProgressiveScanFloodIsRefused") {
  // A progressive file whose last scan is repeated 600 times: libjpeg would run a full pass over
  // the coefficients for each; the decoder stops past 500 scans.
  const std::string jpeg =
      EncodeWithLibjpeg(SmoothRgb(32, 32), 32, 32, {JCS_RGB, JCS_YCbCr, true, 90});
  const size_t last_scan = jpeg.rfind("\xFF\xDA");
  REQUIRE(last_scan != std::string::npos);
  const std::string scan = jpeg.substr(last_scan, jpeg.size() - 2 - last_scan);
  std::string flood = jpeg.substr(0, jpeg.size() - 2);
  for (int i = 0; i < 600; ++i) flood += scan;
  flood += "\xFF\xD9";
  JpegDecoder decoder;
  Image img;
  const Status s = decoder.Decode(flood, &img);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message() == "invalid JPEG: progressive JPEG has more than 500 scans");
  // A few repeats are only a warning.
  std::string some = jpeg.substr(0, jpeg.size() - 2) + scan + scan + "\xFF\xD9";
  REQUIRE(decoder.Decode(some, &img).ok());
}

TEST_CASE("WarningsAreNotPrinted") {
  std::string jpeg =
      EncodeWithLibjpeg(NoisyRgb(64, 64, 9), 64, 64, {JCS_RGB, JCS_YCbCr, false, 90});
  // Garbage inside the scan and a missing EOI: libjpeg warns ("Corrupt JPEG data: ...") and, with
  // its default error manager, prints to stderr.
  for (size_t i = jpeg.size() / 2; i < jpeg.size() / 2 + 40; ++i) jpeg[i] = '\x5A';
  jpeg.resize(jpeg.size() - 2);
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  dup2(fileno(capture), 2);
  JpegDecoder decoder;
  Image img;
  const Status s = decoder.Decode(jpeg, &img);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fseek(capture, 0, SEEK_END);
  const long printed = std::ftell(capture);
  std::fclose(capture);
  REQUIRE(s.ok());
  REQUIRE(printed == 0);
}

TEST_CASE("NotAJpegIsRefusedNamingTheFormat") {
  JpegDecoder decoder;
  Image img;
  const std::string png("\x89PNG\r\n\x1A\n\0\0\0\rIHDR", 16);
  Status s = decoder.Decode(png, &img);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("PNG") != std::string::npos);
  s = decoder.Decode("", &img);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("empty") != std::string::npos);
  REQUIRE(decoder.Decode("hello world", &img).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("HeaderOverMaxPixelsIsRefusedBeforeDecode") {
  const std::vector<uint8_t> src(16 * 16 * 3, 128);
  std::string jpeg;
  JpegEncoder encoder;
  REQUIRE(encoder.Encode({src.data(), 16, 16, 48}, {}, &jpeg).ok());
  // 60000x50000 claimed by a file holding 16x16 pixels of data: refused on the header alone, so
  // neither the 9 GB image nor libjpeg's complaint about missing data is ever reached.
  const std::string huge = testing::WithFrameSize(jpeg, 60000, 50000);
  JpegDecoder decoder;
  Image img;
  Status s = decoder.Decode(huge, &img);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message() == "image of 60000x50000 = 3000000000 pixels exceeds max_pixels 100000000");
  REQUIRE(img.pixels.empty());
  s = decoder.Decode(jpeg, &img, 255);
  REQUIRE(s.message() == "image of 16x16 = 256 pixels exceeds max_pixels 255");
  REQUIRE(decoder.Decode(jpeg, &img, 256).ok());
}

TEST_CASE("DecoderIsReusableAcrossImagesAndErrors") {
  const std::vector<uint8_t> a_src = SmoothRgb(64, 40);
  const std::string a = EncodeWithLibjpeg(a_src, 64, 40, {JCS_RGB, JCS_YCbCr, false, 95});
  const std::string b =
      EncodeWithLibjpeg(InvertedCmykPatches(), 64, 16, {JCS_CMYK, JCS_CMYK, false, 95});
  const std::string c =
      EncodeWithLibjpeg(SmoothRgb(33, 17), 33, 17, {JCS_RGB, JCS_YCbCr, true, 90});
  const std::string truncated = a.substr(0, a.size() / 2);
  const std::string oversize = testing::WithFrameSize(a, 20000, 20000);

  JpegDecoder fresh;
  Image a_ref, c_ref;
  REQUIRE(fresh.Decode(a, &a_ref).ok());
  REQUIRE(JpegDecoder().Decode(c, &c_ref).ok());

  JpegDecoder decoder;
  Image img;
  for (int round = 0; round < 20; ++round) {
    REQUIRE(decoder.Decode(a, &img).ok());
    REQUIRE(img.pixels == a_ref.pixels);
    REQUIRE_FALSE(decoder.Decode(truncated, &img).ok());
    REQUIRE(decoder.Decode(b, &img).ok());
    RequireCmykPatchesDecoded(img);
    REQUIRE_FALSE(decoder.Decode(oversize, &img, 1'000'000).ok());
    REQUIRE_FALSE(decoder.Decode("\x89PNG\r\n\x1A\n", &img).ok());
    REQUIRE(decoder.Decode(c, &img).ok());
    REQUIRE(img.width == 33);
    REQUIRE(img.pixels == c_ref.pixels);
  }
}

}  // namespace
}  // namespace sluice

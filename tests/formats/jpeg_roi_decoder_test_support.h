// Shared by the ROI decoder tests: textured JPEGs of every colour space and sampling, the full
// decode, crop, resize and flip the fused decode stands in for, and the errors between the two.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

// clang-format off
// jpeglib.h uses FILE and size_t without declaring them: <cstdio> must come first.
#include <jpeglib.h>
// clang-format on

#include "formats/crop_window.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_roi_decoder.h"
#include "tests/jpeg_test_images.h"

namespace sluice::roi_testing {

using testing::MakeTestJpeg;
using testing::TestJpegKind;

// Gradients with slow waves, different in each channel. At most about 0.4 levels per pixel in
// any direction: a DCT-scaled decode places the crop's edges within half a scaled pixel (up to 4
// source pixels at 1/8) of where a full decode would, which on such content stays well inside the
// comparison's tolerance. DctScaledWindowIsWithinHalfAScaledPixelOfTheCrop pins the placement.
inline uint8_t Textured(int x, int y, int ch) {
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

inline std::string TexturedJpeg(int width, int height, Sampling sampling,
                                bool progressive = false) {
  return EncodeYCbCr(
      width, height, [](int x, int y, int ch) { return Textured(x, y, ch); }, sampling,
      progressive);
}

inline std::string TexturedGrayJpeg(int width, int height, bool progressive = false) {
  return MakeTestJpeg(
      TestJpegKind::kGray, width, height, [](int x, int y, int) { return Textured(x, y, 0); },
      progressive);
}

// Inverted CMYK (255 = no ink) of the textured colours with a little black.
inline std::string TexturedCmykJpeg(TestJpegKind kind, int width, int height,
                                    bool progressive = false) {
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
inline const std::vector<TestImage>& TestImages() {
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

inline Image FullDecode(const std::string& jpeg) {
  JpegDecoder decoder;
  Image image;
  REQUIRE(decoder.Decode(jpeg, &image).ok());
  return image;
}

// What the fused decode stands in for: full decode, crop, resize, flip.
inline std::vector<uint8_t> Reference(const Image& full, const CropWindow& c, int out_width,
                                      int out_height, bool flip) {
  std::vector<uint8_t> out(static_cast<size_t>(out_width) * out_height * 3);
  Resize(full.view().Crop(c.x, c.y, c.width, c.height), out.data(), out_width, out_height,
         static_cast<size_t>(out_width) * 3);
  if (flip) FlipHorizontal(out.data(), out_width, out_height, static_cast<size_t>(out_width) * 3);
  return out;
}

inline std::vector<uint8_t> Decode(JpegRoiDecoder& decoder, const std::string& jpeg,
                                   const CropWindow& c, int out_width, int out_height, bool flip,
                                   RoiDecodeStats* stats = nullptr) {
  std::vector<uint8_t> out(static_cast<size_t>(out_width) * out_height * 3);
  const Status s = decoder.DecodeCrop(jpeg, c, out_width, out_height, flip, out.data(),
                                      static_cast<size_t>(out_width) * 3, kDefaultMaxPixels, stats);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return out;
}

inline double MeanAbsError(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

inline int MaxAbsError(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  int worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(int{a[i]} - int{b[i]}));
  return worst;
}

inline std::string Describe(const CropWindow& c, int ow, int oh, bool flip) {
  return std::to_string(c.width) + "x" + std::to_string(c.height) + "+" + std::to_string(c.x) +
         "+" + std::to_string(c.y) + " -> " + std::to_string(ow) + "x" + std::to_string(oh) +
         (flip ? " flipped" : "");
}

}  // namespace sluice::roi_testing

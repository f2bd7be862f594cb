// JPEGs of every colour space for tests, written with libjpeg directly so they do not depend on
// the encoder under test: gray, YCbCr, CMYK and YCCK (with Adobe's APP14 marker, inverted values,
// as Photoshop writes them), optionally progressive.
#pragma once

#include <jpeglib.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <string>
#include <vector>

namespace sluice::testing {

// How a test JPEG is written: the input layout and the colour space stored in the file.
struct LibjpegSpec {
  J_COLOR_SPACE in_space = JCS_RGB;  // JCS_RGB, JCS_GRAYSCALE or JCS_CMYK
  J_COLOR_SPACE jpeg_space = JCS_YCbCr;
  bool progressive = false;
  int quality = 95;
};

inline int InputComponents(J_COLOR_SPACE in_space) {
  return in_space == JCS_GRAYSCALE ? 1 : in_space == JCS_CMYK ? 4 : 3;
}

// pixels: width * height * InputComponents(spec.in_space) samples, row-major.
inline std::string EncodeWithLibjpeg(const std::vector<uint8_t>& pixels, int width, int height,
                                     const LibjpegSpec& spec) {
  const int comps = InputComponents(spec.in_space);
  if (pixels.size() != static_cast<size_t>(width) * height * comps) std::abort();
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = width;
  c.image_height = height;
  c.input_components = comps;
  c.in_color_space = spec.in_space;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, spec.jpeg_space);
  jpeg_set_quality(&c, spec.quality, TRUE);
  if (spec.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(&pixels[static_cast<size_t>(c.next_scanline) * width * comps]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

enum class TestJpegKind { kGray, kYCbCr, kCmyk, kYcck };

// pixel(x, y, channel) gives the sample values in the input colour space: 1 channel for gray, 3
// RGB for YCbCr, 4 *inverted* CMYK (255 = no ink) for CMYK and YCCK.
template <typename PixelFn>
std::string MakeTestJpeg(TestJpegKind kind, int width, int height, PixelFn pixel,
                         bool progressive = false, int quality = 95) {
  LibjpegSpec spec;
  spec.progressive = progressive;
  spec.quality = quality;
  switch (kind) {
    case TestJpegKind::kGray: spec.in_space = spec.jpeg_space = JCS_GRAYSCALE; break;
    case TestJpegKind::kYCbCr: spec.in_space = JCS_RGB, spec.jpeg_space = JCS_YCbCr; break;
    case TestJpegKind::kCmyk: spec.in_space = spec.jpeg_space = JCS_CMYK; break;
    case TestJpegKind::kYcck: spec.in_space = JCS_CMYK, spec.jpeg_space = JCS_YCCK; break;
  }
  const int comps = InputComponents(spec.in_space);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * comps);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int ch = 0; ch < comps; ++ch) {
        pixels[(static_cast<size_t>(y) * width + x) * comps + ch] = pixel(x, y, ch);
      }
    }
  }
  return EncodeWithLibjpeg(pixels, width, height, spec);
}

// Rewrites the frame size in a baseline JPEG's SOF0 segment (to fake huge images cheaply).
inline std::string WithFrameSize(std::string jpeg, int width, int height) {
  const size_t sof = jpeg.find("\xFF\xC0");
  REQUIRE(sof != std::string::npos);
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xFF);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xFF);
  return jpeg;
}

// A width x height RGB JPEG written a row at a time, so that a huge image (a decompression bomb)
// needs one row of memory to make: row(y, samples) fills width * 3 samples. 4:2:0 (libjpeg's
// default) unless `subsampled` is false (4:4:4); progressive when asked.
template <typename RowFn>
std::string EncodeRowsWithLibjpeg(int width, int height, bool progressive, bool subsampled,
                                  int quality, RowFn row) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;  // NOLINT(google-runtime-int)
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  if (!subsampled) {
    for (int i = 0; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  }
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> samples(static_cast<size_t>(width) * 3);
  while (c.next_scanline < c.image_height) {
    row(static_cast<int>(c.next_scanline), samples.data());
    JSAMPROW p = samples.data();
    jpeg_write_scanlines(&c, &p, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string jpeg(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return jpeg;
}

// A smooth colourful gradient, easy on JPEG so round trips stay close.
inline std::string MakeGradientJpeg(int width, int height, int quality = 95) {
  return MakeTestJpeg(TestJpegKind::kYCbCr, width, height,
                      [&](int x, int y, int ch) -> uint8_t {
                        return static_cast<uint8_t>(ch == 0 ? x * 255 / std::max(1, width - 1)
                                                    : ch == 1 ? y * 255 / std::max(1, height - 1)
                                                              : 128);
                      },
                      false, quality);
}

}  // namespace sluice::testing

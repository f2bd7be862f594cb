// JPEGs of every colour space for tests, written with libjpeg directly so they do not depend on
// the encoder under test: gray, YCbCr, CMYK and YCCK (with Adobe's APP14 marker, inverted values,
// as Photoshop writes them), optionally progressive.
#pragma once

#include <jpeglib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace sluice::testing {

enum class TestJpegKind { kGray, kYCbCr, kCmyk, kYcck };

// pixel(x, y, channel) gives the sample values in the input colour space: 1 channel for gray, 3
// RGB for YCbCr, 4 *inverted* CMYK (255 = no ink) for CMYK and YCCK.
template <typename PixelFn>
std::string MakeTestJpeg(TestJpegKind kind, int width, int height, PixelFn pixel,
                         bool progressive = false, int quality = 95) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = width;
  c.image_height = height;
  int channels = 3;
  switch (kind) {
    case TestJpegKind::kGray: c.in_color_space = JCS_GRAYSCALE, channels = 1; break;
    case TestJpegKind::kYCbCr: c.in_color_space = JCS_RGB, channels = 3; break;
    case TestJpegKind::kCmyk:
    case TestJpegKind::kYcck: c.in_color_space = JCS_CMYK, channels = 4; break;
  }
  c.input_components = channels;
  jpeg_set_defaults(&c);
  if (kind == TestJpegKind::kCmyk) jpeg_set_colorspace(&c, JCS_CMYK);
  if (kind == TestJpegKind::kYcck) jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, quality, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width) * channels);
  while (c.next_scanline < c.image_height) {
    int y = static_cast<int>(c.next_scanline);
    for (int x = 0; x < width; ++x) {
      for (int ch = 0; ch < channels; ++ch) row[x * channels + ch] = pixel(x, y, ch);
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

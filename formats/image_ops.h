// Pure pixel kernels on interleaved RGB uint8 images: crop views, resize, flip, noise-free helpers.
// They write into memory the caller provides, so the pipeline can aim them at a batch slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

// A read-only window on RGB pixels; stride is in bytes between rows.
struct ImageView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  size_t stride = 0;

  const uint8_t* row(int y) const { return data + static_cast<size_t>(y) * stride; }
  // REQUIRES: the rectangle lies inside the image.
  ImageView Crop(int x, int y, int w, int h) const {
    return ImageView{data + static_cast<size_t>(y) * stride + static_cast<size_t>(x) * 3, w, h,
                     stride};
  }
};

// An owned, tightly packed RGB image.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3

  void Resize(int w, int h) {
    width = w;
    height = h;
    pixels.resize(static_cast<size_t>(w) * h * 3);
  }
  ImageView view() const { return ImageView{pixels.data(), width, height, static_cast<size_t>(width) * 3}; }
};

// Resizes src into dst (dst_width x dst_height RGB, rows dst_stride bytes apart). Bilinear when
// enlarging or shrinking up to 2x; when shrinking more, the filter widens with the scale so every
// source pixel contributes (area averaging), which avoids the aliasing of plain bilinear.
// Separable, fixed-point weights. Thread-safe (no shared state).
void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride);

// Mirrors an RGB image left-right in place.
void FlipHorizontal(uint8_t* data, int width, int height, size_t stride);

// Converts gray (1 byte per pixel) to RGB.
void GrayToRgb(const uint8_t* gray, size_t n_pixels, uint8_t* rgb);

// Converts CMYK to RGB. inverted: Adobe writes CMYK JPEGs with inverted values (255 = no ink),
// which is what libjpeg hands back for them.
void CmykToRgb(const uint8_t* cmyk, size_t n_pixels, bool inverted, uint8_t* rgb);

}  // namespace sluice

// Synthetic RGB images and pixel access shared by the image kernels' tests (formats/image_ops.h,
// formats/pixel_ops.h, formats/policy_ops.h) and the probe that runs those kernels for Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "formats/image_ops.h"
#include "formats/pixel_ops.h"

namespace sluice::testing {

// Every byte drawn from mt19937(seed): the same image for the same seed on every platform.
inline Image RandomImage(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  Image img;
  img.Resize(width, height);
  for (auto& v : img.pixels) v = static_cast<uint8_t>(rng());
  return img;
}

// Every pixel (r, g, b).
inline Image Filled(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Image img;
  img.Resize(width, height);
  for (size_t i = 0; i < img.pixels.size(); i += 3) {
    img.pixels[i] = r;
    img.pixels[i + 1] = g;
    img.pixels[i + 2] = b;
  }
  return img;
}

// The whole of `img`, tightly packed, for the kernels that work in place.
inline MutableImageView Mutable(Image& img) {
  return MutableImageView{img.pixels.data(), img.width, img.height,
                          static_cast<size_t>(img.width) * 3};
}

// Channel `c` of pixel (x, y).
inline uint8_t At(const Image& img, int x, int y, int c) {
  return img.pixels[(static_cast<size_t>(y) * img.width + x) * 3 + c];
}

// The filter's name as the probe's `filter` parameter spells it.
inline const char* FilterName(ResizeFilter f) {
  switch (f) {
    case ResizeFilter::kBilinear:
      return "bilinear";
    case ResizeFilter::kArea:
      return "area";
    case ResizeFilter::kBicubic:
      return "bicubic";
  }
  return "?";
}

}  // namespace sluice::testing

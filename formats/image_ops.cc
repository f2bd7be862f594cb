#include "formats/image_ops.h"

#include <cstring>
#include <vector>

namespace sluice {

void FlipHorizontal(uint8_t* data, int width, int height, size_t stride) {
  if (width < 2) return;
  // Each row is copied aside, then written back in reverse with one 4-byte load and store per
  // pixel (a third of the memory operations of byte swaps). A store's fourth byte lands on the
  // next pixel, which is written next; the last pixel is stored with 3 bytes to stay in the row,
  // and the copy has a byte of slack for the 4-byte load of its last pixel.
  thread_local std::vector<uint8_t> copy;
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  copy.resize(row_bytes + 1);
  for (int y = 0; y < height; ++y) {
    uint8_t* row = data + y * stride;
    std::memcpy(copy.data(), row, row_bytes);
    const uint8_t* from = copy.data() + row_bytes - 3;
    uint8_t* to = row;
    for (int x = 0; x + 1 < width; ++x, from -= 3, to += 3) {
      std::memcpy(to, from, 4);
    }
    std::memcpy(to, from, 3);
  }
}

void GrayToRgb(const uint8_t* gray, size_t n_pixels, uint8_t* rgb) {
  for (size_t i = 0; i < n_pixels; ++i) {
    rgb[3 * i] = gray[i];
    rgb[3 * i + 1] = gray[i];
    rgb[3 * i + 2] = gray[i];
  }
}

namespace {
// round(v / 255) for v in 0..255*255, exactly.
inline uint8_t Div255(int v) {
  v += 128;
  return static_cast<uint8_t>((v + (v >> 8)) >> 8);
}
}  // namespace

void CmykToRgb(const uint8_t* cmyk, size_t n_pixels, bool inverted, uint8_t* rgb) {
  if (inverted) {
    // Values are already "amount of no ink": R = C' * K' / 255.
    for (size_t i = 0; i < n_pixels; ++i) {
      const int k = cmyk[4 * i + 3];
      rgb[3 * i] = Div255(cmyk[4 * i] * k);
      rgb[3 * i + 1] = Div255(cmyk[4 * i + 1] * k);
      rgb[3 * i + 2] = Div255(cmyk[4 * i + 2] * k);
    }
  } else {
    for (size_t i = 0; i < n_pixels; ++i) {
      const int k = 255 - cmyk[4 * i + 3];
      rgb[3 * i] = Div255((255 - cmyk[4 * i]) * k);
      rgb[3 * i + 1] = Div255((255 - cmyk[4 * i + 1]) * k);
      rgb[3 * i + 2] = Div255((255 - cmyk[4 * i + 2]) * k);
    }
  }
}

}  // namespace sluice

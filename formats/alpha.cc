#include "formats/alpha.h"

namespace sluice {

void FlattenRgba(const uint8_t* rgba, size_t n, Alpha alpha, uint8_t* rgb) {
  const uint32_t bg = alpha == Alpha::kCompositeWhite ? 255 : 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rgba[4 * i], g = rgba[4 * i + 1], b = rgba[4 * i + 2], a = rgba[4 * i + 3];
    if (alpha == Alpha::kDrop) {
      rgb[3 * i] = static_cast<uint8_t>(r);
      rgb[3 * i + 1] = static_cast<uint8_t>(g);
      rgb[3 * i + 2] = static_cast<uint8_t>(b);
      continue;
    }
    const uint32_t back = bg * (255 - a) + 127;
    rgb[3 * i] = static_cast<uint8_t>((r * a + back) / 255);
    rgb[3 * i + 1] = static_cast<uint8_t>((g * a + back) / 255);
    rgb[3 * i + 2] = static_cast<uint8_t>((b * a + back) / 255);
  }
}

}  // namespace sluice

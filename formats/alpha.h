// What becomes of an image's alpha (a PNG's alpha channel or tRNS, a WebP's alpha), shared by the
// decoders that meet it (formats/png_codec.h, formats/webp_codec.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

// Dropped as PIL's convert("RGB") drops it, or composited onto an opaque white or black background
// (proto sluice.v1.Alpha).
enum class Alpha { kDrop, kCompositeWhite, kCompositeBlack };

// n RGBA pixels to RGB: alpha dropped, or composited onto the background alpha names with exact
// integer rounding, out = round((c * a + bg * (255 - a)) / 255) (the denominator is odd: no ties),
// which equals PIL's Image.alpha_composite onto an opaque background. rgb may be rgba itself
// (each pixel is read before its bytes are written, and pixel i writes below where pixel i + 1
// starts).
void FlattenRgba(const uint8_t* rgba, size_t n, Alpha alpha, uint8_t* rgb);

}  // namespace sluice

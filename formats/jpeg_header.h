// Reads what a JPEG says about itself from its markers alone (no decoder, no allocation), and
// names other image formats by their magic bytes so a skip message can say what a file is.
#pragma once

#include <cstdint>
#include <string_view>

#include "formats/status.h"

namespace sluice {

enum class JpegColorSpace { kGray, kYCbCr, kRGB, kCMYK, kYCCK, kUnknown };
std::string_view JpegColorSpaceName(JpegColorSpace c);

struct JpegHeader {
  int width = 0;
  int height = 0;
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  JpegColorSpace color_space = JpegColorSpace::kUnknown;
  bool progressive = false;
};

// Walks the markers up to the first SOFn. InvalidArgument when data is not a JPEG (naming what it
// is, e.g. "PNG image, not JPEG") or the header is cut short or malformed (naming the offset).
Result<JpegHeader> ReadJpegHeader(std::string_view data);

// "JPEG", "PNG", "GIF", "WebP", "BMP", "TIFF", "empty" or "unknown", from the first bytes.
std::string_view SniffImageFormat(std::string_view data);

}  // namespace sluice

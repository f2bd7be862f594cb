// PNG decode to packed RGB with libpng (its low-level read API and transforms): every colour type
// and bit depth, interlaced or not. libpng's errors become Status (its longjmp never crosses a C++
// frame that owns anything; a libpng warning is not an error); nothing calls abort() or exit().
//
// What the pixels are, and why (PIL is the reference, tests/python/test_pil_png.py):
// - 8-bit and lower: PIL's Image.open(f).convert("RGB"), byte for byte (gray 1/2/4 bits scaled to
//   0..255, palettes looked up, gray replicated to R, G and B).
// - 16-bit: each sample's high byte, v >> 8 (libpng's png_set_strip_16), which is what PIL gives
//   for 16-bit RGB, RGBA and gray+alpha and tf.io.decode_png(dtype=uint8) for every colour type.
//   PIL's convert("RGB") of a 16-bit gray image (its mode "I") clips instead, min(v, 255), which
//   would turn almost every such image white; Sluice keeps the high byte there too.
// - Alpha (an alpha channel or a tRNS chunk) per Alpha: dropped as PIL's convert("RGB") drops it,
//   or composited onto an opaque white or black background after the 16-to-8-bit step:
//   out = round((c * a + bg * (255 - a)) / 255), exact integer rounding (the denominator is odd,
//   so there are no ties), which equals PIL's Image.alpha_composite onto an opaque background.
// - A palette image's tRNS longer than its PLTE: its first entries apply, as in PIL (libpng would
//   drop the chunk; Sluice reads it from the file).
// Where Sluice differs from PIL on purpose (pinned by tests/formats/png_codec_test.cc, the first
// also beside PIL in tests/python/test_pil_png.py):
// - A palette index past the PLTE's entries is refused (InvalidArgument naming the index and the
//   PLTE's length); PIL shows it as gray (i, i, i), libpng as black: either is a silently wrong
//   image.
// - A tRNS colour of 2/4-bit or 16-bit gray or 16-bit RGB is compared with the raw samples, as the
//   PNG spec says; PIL compares the raw value with samples it has scaled to 8 bits, so other
//   pixels, or none, turn transparent.
// - An IDAT whose CRC does not match is damage and refused; PIL does not check IDAT CRCs.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/alpha.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/status.h"

namespace sluice {

// PNG colour types as IHDR numbers them.
enum class PngColorType : uint8_t {
  kGray = 0,
  kRgb = 2,
  kPalette = 3,
  kGrayAlpha = 4,
  kRgbAlpha = 6,
};
std::string_view PngColorTypeName(PngColorType t);

// The PNG signature, eight bytes.
inline constexpr std::string_view kPngSignature{"\x89PNG\r\n\x1A\n", 8};

inline bool IsPng(std::string_view data) { return data.substr(0, 8) == kPngSignature; }

struct PngHeader {
  int width = 0;
  int height = 0;
  int bit_depth = 0;  // bits per sample: 1, 2, 4, 8 or 16
  PngColorType color_type = PngColorType::kRgb;
  bool interlaced = false;  // Adam7
};

// Reads the signature and the IHDR chunk that must follow it (no libpng, no allocation).
// InvalidArgument naming the byte offset when data is not a PNG, is cut short before IHDR ends, or
// IHDR is malformed (zero or over 2^31-1 size, a bit depth the colour type does not allow, an
// unknown colour type, compression, filter or interlace method, a CRC mismatch).
Result<PngHeader> ReadPngHeader(std::string_view data);

// Bytes a decode of an image with this header holds at once, for DecodeMemoryGate: the RGB pixels
// (RGBA while an interlaced image with alpha to composite is assembled), libpng's two rows of the
// widest sample layout, zlib's inflate state and window, and our row of RGBA.
int64_t EstimatePngDecodeBytes(const PngHeader& header, Alpha alpha);

// Decodes a PNG into packed RGB (see the top of this file for what the pixels are). A header over
// max_pixels is refused before anything is allocated, naming the size; then the gate, if any, is
// asked once for EstimatePngDecodeBytes. Damage (a bad signature or chunk, a CRC or zlib error,
// too little image data, a palette index past the PLTE) is InvalidArgument with libpng's message
// or ours; data that ends before the last row is complete is DataLoss naming the byte where it
// ends. Once every row is decoded, the image is whole: what the file lacks after that (the zlib
// stream's end and checksum, the last IDAT's CRC, IEND) is not an error, as in PIL; a CRC that is
// there and wrong still is.
// Reusable: keep one per thread. Between images it keeps a row buffer of at most
// kKeptRowBytes (a wider image's is freed when its decode ends: no budget counts it then).
class PngDecoder {
 public:
  PngDecoder() = default;
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;

  Status Decode(std::string_view data, Alpha alpha, Image* out,
                int64_t max_pixels = kDefaultMaxPixels, const DecodeMemoryGate* gate = nullptr);

  // The most bytes libpng and zlib held at once during the last Decode (their every allocation
  // is counted), which EstimatePngDecodeBytes covers; and the bytes this decoder keeps now.
  int64_t last_libpng_peak_bytes() const { return last_libpng_peak_bytes_; }
  size_t kept_bytes() const { return row_.capacity(); }

  // An ordinary image's row of RGBA (512 KiB of pixels), as JpegRoiDecoder::kKeptRowsBytes.
  static constexpr size_t kKeptRowBytes = size_t{2} << 20;

 private:
  std::vector<uint8_t> row_;  // one row of RGBA, when alpha is composited row by row
  int64_t last_libpng_peak_bytes_ = 0;
};

}  // namespace sluice

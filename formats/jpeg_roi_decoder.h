// The fused decode at the heart of the pipeline: JPEG → crop window → resized RGB, decoding only
// what the crop needs. From the header it picks the smallest DCT scale among 1/8, 1/4, 1/2 and 1
// (the SIMD-accelerated ones; others are slower than a full decode here) that keeps the crop at
// least the output size, decodes only the crop's columns (jpeg_crop_scanline) and rows
// (jpeg_skip_scanlines, stopping after the last one with jpeg_abort_decompress), then resizes
// and optionally mirrors straight into the caller's memory (a slot of a batch buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "formats/crop_window.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_header.h"
#include "formats/status.h"

namespace sluice {

struct RoiDecodeStats {
  int scale_denom = 1;  // 1, 2, 4 or 8
  // At the chosen scale: rows up to the crop's last, where decoding stops. Those above the crop
  // are skipped (entropy-decoded only, no IDCT or colour conversion); those below are never read.
  int64_t rows_decoded = 0;
  int64_t rows_total = 0;  // image rows at the chosen scale
};

// One per thread: holds the libjpeg state and scratch rows, reused across images.
class JpegRoiDecoder {
 public:
  // fast_idct: libjpeg's fast integer IDCT (JDCT_IFAST, TensorFlow's decode_jpeg default) instead
  // of the accurate one; a few percent quicker, within a level or two of it.
  explicit JpegRoiDecoder(bool fast_idct = false);
  ~JpegRoiDecoder();
  JpegRoiDecoder(const JpegRoiDecoder&) = delete;
  JpegRoiDecoder& operator=(const JpegRoiDecoder&) = delete;

  // Reads only the header: dimensions and colour space. A header over max_pixels is
  // InvalidArgument before anything is allocated.
  Result<JpegHeader> ReadHeader(std::string_view jpeg, int64_t max_pixels = kDefaultMaxPixels);

  // Decodes `crop` (source pixel coordinates, inside the image) of jpeg and writes it resized to
  // out_width x out_height RGB at out (rows out_stride bytes apart), mirrored when flip. Any
  // colour space (gray, YCbCr, RGB, CMYK, YCCK) comes out RGB. Corrupt data is InvalidArgument;
  // out is then partly written.
  // At a DCT scale of 1/d (d > 1) the crop's edges snap to the nearest multiple of d source
  // pixels: within d/2 of the exact window, which is under half an output pixel since the scaled
  // crop is at least the output size. At full scale the window is exact.
  // gate, when given, is asked before anything is allocated for the image (DecodeMemoryGate);
  // libjpeg is held to its estimate either way. Decoded rows over kKeptRowsBytes are not kept
  // for the next image.
  Status DecodeCrop(std::string_view jpeg, const CropWindow& crop, int out_width, int out_height,
                    bool flip, uint8_t* out, size_t out_stride,
                    int64_t max_pixels = kDefaultMaxPixels, RoiDecodeStats* stats = nullptr,
                    const DecodeMemoryGate* gate = nullptr);
  // As above, resized with options.filter and mirrored as options says (Resize with
  // ResizeOptions); the bool overload is this one with {kBilinear, flip, false}. The DCT scale is
  // chosen as above whatever the filter: at 1/d libjpeg's scaled IDCT has already averaged d x d
  // blocks before the filter runs.
  Status DecodeCrop(std::string_view jpeg, const CropWindow& crop, int out_width, int out_height,
                    const ResizeOptions& options, uint8_t* out, size_t out_stride,
                    int64_t max_pixels = kDefaultMaxPixels, RoiDecodeStats* stats = nullptr,
                    const DecodeMemoryGate* gate = nullptr);

  // The decoded rows a decoder keeps between images: an ordinary crop's (up to ~800x800 at the
  // chosen scale), not a huge image's, which no budget counts once its decode is over.
  static constexpr size_t kKeptRowsBytes = size_t{2} << 20;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice

// JPEG decode to RGB and encode from RGB with libjpeg-turbo (its libjpeg API, which the fused ROI
// decoder of the pipeline also needs). Handles are RAII; libjpeg errors become Status, never
// longjmp across our frames or exit().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/image_ops.h"
#include "formats/status.h"

namespace sluice {

inline constexpr int64_t kDefaultMaxPixels = 100'000'000;

// Asked by a decoder once it has read an image's header and before it allocates anything for the
// image, with its estimate of all the decode allocates: libjpeg's buffers (for a progressive or
// other multi-scan file, the DCT coefficients of the whole image) and the decoded pixels. OK lets
// the decode go ahead; an error refuses the image with that status. Either way libjpeg is held to
// its part of the estimate: it fails rather than allocate its whole-image buffers past it.
using DecodeMemoryGate = std::function<Status(int64_t estimated_bytes)>;

// Decodes any JPEG (gray, YCbCr, RGB, CMYK, YCCK; baseline or progressive) into interleaved RGB.
// A header over max_pixels is refused before any allocation. Corrupt data is InvalidArgument with
// libjpeg's message. Reusable: keep one per thread to avoid re-creating libjpeg state.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  Status Decode(std::string_view data, Image* out, int64_t max_pixels = kDefaultMaxPixels,
                const DecodeMemoryGate* gate = nullptr);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct JpegEncodeOptions {
  int quality = 90;           // 1..100
  bool subsample_420 = true;  // 4:2:0 chroma as cameras and ImageNet do; false = 4:4:4
};

// Encodes RGB pixels as a baseline JPEG. Reusable; one per thread.
class JpegEncoder {
 public:
  JpegEncoder();
  ~JpegEncoder();
  JpegEncoder(const JpegEncoder&) = delete;
  JpegEncoder& operator=(const JpegEncoder&) = delete;

  Status Encode(const ImageView& image, const JpegEncodeOptions& options, std::string* out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice

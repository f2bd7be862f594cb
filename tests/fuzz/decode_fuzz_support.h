// What the image decode fuzz targets (png_decode_fuzz.cc, webp_decode_fuzz.cc) share: a small
// pixel cap, a memory gate that records how it was asked, and the check of a decode that succeeded.
#pragma once

#include <cstdint>

#include "formats/jpeg_codec.h"
#include "formats/status.h"
#include "tests/fuzz/fuzz_check.h"

namespace sluice::fuzz {

// Keeps decodes small: the fuzzer's time goes into the parsers, not into big images.
inline constexpr int64_t kMaxPixels = 1 << 20;

// Grants every request of its gate(), counting them and keeping the last estimate.
class RecordingGate {
 public:
  RecordingGate() = default;
  RecordingGate(const RecordingGate&) = delete;
  RecordingGate& operator=(const RecordingGate&) = delete;

  const DecodeMemoryGate& gate() const { return gate_; }
  int asked() const { return asked_; }
  int64_t estimate() const { return estimate_; }

 private:
  int asked_ = 0;
  int64_t estimate_ = 0;
  const DecodeMemoryGate gate_ = [this](int64_t bytes) {
    ++asked_;
    estimate_ = bytes;
    return Status::OK();
  };
};

// A decode that succeeded (s) gives the size the header reader read, as RGB.
template <typename Header>
void CheckDecodedAsTheHeaderSays(const Status& s, const Result<Header>& header,
                                 const Image& image) {
  if (!s.ok()) return;
  FUZZ_CHECK(header.ok() && image.width == header->width && image.height == header->height &&
                 image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3,
             "decoded %dx%d", image.width, image.height);
}

}  // namespace sluice::fuzz

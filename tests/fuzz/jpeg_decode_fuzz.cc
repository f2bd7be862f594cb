// The JPEG paths the pipeline runs on every image, over arbitrary bytes: the marker-only header
// reader, libjpeg's header through JpegRoiDecoder, the fused crop decode and the full decode. They
// must agree on what the image is, never write outside the output they are given, and turn every
// bad file into an InvalidArgument.
//
// Input: bytes 0-3 pick the crop (x, y, width, height as fractions of the image), byte 4 the
// output size (1-64 square), byte 5 flip (bit 0) and the fast IDCT (bit 1); the rest is the file.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "formats/crop_window.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_header.h"
#include "formats/jpeg_roi_decoder.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Keeps decodes small: the fuzzer's time goes into the parsers, not into big images.
constexpr int64_t kMaxPixels = 1 << 20;
constexpr uint8_t kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

int Fraction(uint8_t b, int extent) { return static_cast<int>(int64_t{b} * extent / 256); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  if (size < 6) return 0;
  const std::string_view jpeg(reinterpret_cast<const char*>(data) + 6, size - 6);
  const bool flip = data[5] & 1;
  // One of each per process, as the pipeline keeps one per thread: state must survive errors.
  static JpegRoiDecoder roi_slow(false), roi_fast(true);
  static JpegDecoder full;
  JpegRoiDecoder& roi = (data[5] & 2) ? roi_fast : roi_slow;

  (void)SniffImageFormat(jpeg);
  const Result<JpegHeader> markers = ReadJpegHeader(jpeg);
  const Result<JpegHeader> header = roi.ReadHeader(jpeg, kMaxPixels);
  FUZZ_CHECK(header.ok() || header.status().code() == StatusCode::kInvalidArgument, "%s",
             header.status().ToString().c_str());
  if (!header.ok()) return 0;
  if (markers.ok()) {
    FUZZ_CHECK(markers->width == header->width && markers->height == header->height &&
                   markers->components == header->components,
               "markers say %dx%dx%d, libjpeg %dx%dx%d", markers->width, markers->height,
               markers->components, header->width, header->height, header->components);
  }
  const int w = header->width, h = header->height;
  FUZZ_CHECK(w > 0 && h > 0 && int64_t{w} * h <= kMaxPixels, "header %dx%d", w, h);

  CropWindow crop;
  crop.x = Fraction(data[0], w);
  crop.y = Fraction(data[1], h);
  crop.width = 1 + Fraction(data[2], w - crop.x);
  crop.height = 1 + Fraction(data[3], h - crop.y);
  const int out_size = 1 + data[4] % 64;
  const size_t stride = static_cast<size_t>(out_size) * 3 + 5;  // a gap after each row
  std::vector<uint8_t> out(kGuardBytes + stride * out_size + kGuardBytes, kGuard);
  uint8_t* first = out.data() + kGuardBytes;
  RoiDecodeStats stats;
  const Status decoded =
      roi.DecodeCrop(jpeg, crop, out_size, out_size, flip, first, stride, kMaxPixels, &stats);
  FUZZ_CHECK(decoded.ok() || decoded.code() == StatusCode::kInvalidArgument, "%s",
             decoded.ToString().c_str());
  for (size_t i = 0; i < out.size(); ++i) {
    const bool inside = i >= kGuardBytes && i < kGuardBytes + stride * out_size &&
                        (i - kGuardBytes) % stride < static_cast<size_t>(out_size) * 3;
    FUZZ_CHECK(inside || out[i] == kGuard, "DecodeCrop wrote byte %zu outside its output", i);
  }
  if (decoded.ok()) {
    FUZZ_CHECK(stats.scale_denom == 1 || stats.scale_denom == 2 || stats.scale_denom == 4 ||
                   stats.scale_denom == 8,
               "scale 1/%d", stats.scale_denom);
    FUZZ_CHECK(stats.rows_decoded <= stats.rows_total, "rows %lld of %lld",
               (long long)stats.rows_decoded, (long long)stats.rows_total);
  }

  Image image;
  const Status whole = full.Decode(jpeg, &image, kMaxPixels);
  FUZZ_CHECK(whole.ok() || whole.code() == StatusCode::kInvalidArgument, "%s",
             whole.ToString().c_str());
  if (whole.ok()) {
    FUZZ_CHECK(image.width == w && image.height == h &&
                   image.pixels.size() == static_cast<size_t>(w) * h * 3,
               "decoded %dx%d, header %dx%d", image.width, image.height, w, h);
  }
  return 0;
}

// The PNG decode the pipeline runs on every PNG record, over arbitrary bytes: the IHDR reader and
// libpng's decode under each alpha policy. They must agree on the size, ask the memory gate once
// for an estimate that covers the pixels they allocate, and turn every bad file into
// InvalidArgument (or DataLoss when it ends early), never a crash or an abort.
//
// Input: byte 0 picks the alpha policy (mod 3); the rest is the file.
#include <cstdint>
#include <string_view>

#include "formats/png_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Keeps decodes small: the fuzzer's time goes into the parsers, not into big images.
constexpr int64_t kMaxPixels = 1 << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  if (size < 1) return 0;
  const Alpha alpha = static_cast<Alpha>(data[0] % 3);
  const std::string_view png(reinterpret_cast<const char*>(data) + 1, size - 1);
  // One per process, as the pipeline keeps one per thread: state must survive errors.
  static PngDecoder decoder;

  const Result<PngHeader> header = ReadPngHeader(png);
  FUZZ_CHECK(header.ok() || header.status().code() == StatusCode::kInvalidArgument, "%s",
             header.status().ToString().c_str());
  int asked = 0;
  int64_t estimate = 0;
  const DecodeMemoryGate gate = [&](int64_t bytes) {
    ++asked;
    estimate = bytes;
    return Status::OK();
  };
  Image image;
  const Status s = decoder.Decode(png, alpha, &image, kMaxPixels, &gate);
  FUZZ_CHECK(s.ok() || s.code() == StatusCode::kInvalidArgument ||
                 s.code() == StatusCode::kDataLoss,
             "%s", s.ToString().c_str());
  FUZZ_CHECK(asked <= 1, "the gate was asked %d times", asked);
  if (asked == 1) {
    FUZZ_CHECK(header.ok(), "the gate was asked for a file whose IHDR does not read");
    FUZZ_CHECK(estimate == EstimatePngDecodeBytes(*header, alpha), "estimate %lld",
               static_cast<long long>(estimate));
    FUZZ_CHECK(static_cast<int64_t>(image.pixels.capacity()) <= estimate,
               "%zu bytes of pixels allocated over the estimate of %lld", image.pixels.capacity(),
               static_cast<long long>(estimate));
  }
  if (s.ok()) {
    FUZZ_CHECK(header.ok() && image.width == header->width && image.height == header->height &&
                   image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3,
               "decoded %dx%d", image.width, image.height);
  }
  return 0;
}

// The PNG decode the pipeline runs on every PNG record, over arbitrary bytes: the IHDR reader and
// libpng's decode under each alpha policy. They must agree on the size, ask the memory gate once
// for an estimate that covers the pixels they allocate, and turn every bad file into
// InvalidArgument (or DataLoss when it ends early), never a crash or an abort.
//
// Input: byte 0 picks the alpha policy (mod 3); the rest is the file.
#include <cstdint>
#include <string_view>

#include "formats/png_codec.h"
#include "tests/fuzz/decode_fuzz_support.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using fuzz::kMaxPixels;
  if (size < 1) return 0;
  const Alpha alpha = static_cast<Alpha>(data[0] % 3);
  const std::string_view png(reinterpret_cast<const char*>(data) + 1, size - 1);
  // One per process, as the pipeline keeps one per thread: state must survive errors.
  static PngDecoder decoder;

  const Result<PngHeader> header = ReadPngHeader(png);
  FUZZ_CHECK(header.ok() || header.status().code() == StatusCode::kInvalidArgument, "%s",
             header.status().ToString().c_str());
  fuzz::RecordingGate gate;
  Image image;
  const Status s = decoder.Decode(png, alpha, &image, kMaxPixels, &gate.gate());
  FUZZ_CHECK(s.ok() || s.code() == StatusCode::kInvalidArgument ||
                 s.code() == StatusCode::kDataLoss,
             "%s", s.ToString().c_str());
  FUZZ_CHECK(gate.asked() <= 1, "the gate was asked %d times", gate.asked());
  if (gate.asked() == 1) {
    FUZZ_CHECK(header.ok(), "the gate was asked for a file whose IHDR does not read");
    FUZZ_CHECK(gate.estimate() == EstimatePngDecodeBytes(*header, alpha), "estimate %lld",
               static_cast<long long>(gate.estimate()));
    FUZZ_CHECK(static_cast<int64_t>(image.pixels.capacity()) <= gate.estimate(),
               "%zu bytes of pixels allocated over the estimate of %lld", image.pixels.capacity(),
               static_cast<long long>(gate.estimate()));
  }
  fuzz::CheckDecodedAsTheHeaderSays(s, header, image);
  return 0;
}

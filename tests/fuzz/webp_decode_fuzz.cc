// The WebP decode the pipeline runs on every WebP record, over arbitrary bytes: the header reader,
// the lossless bitstream reader that counts libwebp's Huffman tables
// (formats/webp_lossless_header.h) and libwebp's decode under each alpha policy. They must agree
// on the size, ask the memory gate once for the estimate of the header and tables they read,
// allocate no more pixels than it counts, and turn every bad file into InvalidArgument (or
// DataLoss when it ends early), never a crash or an abort. The rest of the input is also read
// as a bare lossless bitstream of a small image, to reach that reader without a RIFF around it.
//
// Input: byte 0 picks the alpha policy (mod 3) and the bare stream's size and kind; the rest is
// the file.
#include <cstdint>
#include <string_view>

#include "formats/webp_codec.h"
#include "formats/webp_lossless_header.h"
#include "tests/fuzz/decode_fuzz_support.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using fuzz::kMaxPixels;
  if (size < 1) return 0;
  const Alpha alpha = static_cast<Alpha>(data[0] % 3);
  const std::string_view webp(reinterpret_cast<const char*>(data) + 1, size - 1);

  const Result<WebpHeader> header = ReadWebpHeader(webp);
  FUZZ_CHECK(header.ok() || header.status().code() == StatusCode::kInvalidArgument ||
                 header.status().code() == StatusCode::kDataLoss,
             "%s", header.status().ToString().c_str());
  const Result<LosslessCodes> bare =
      ReadLosslessCodes(webp, 1 + data[0] % 37, 1 + data[0] % 23,
                        (data[0] & 0x80) != 0 ? LosslessStream::kAlph : LosslessStream::kVp8l);
  FUZZ_CHECK(bare.ok() || bare.status().code() == StatusCode::kInvalidArgument ||
                 bare.status().code() == StatusCode::kDataLoss,
             "%s", bare.status().ToString().c_str());
  if (bare.ok()) {
    FUZZ_CHECK(bare->groups >= 1 && bare->groups <= bare->max_group + 1 &&
                   bare->max_group < 65536 && bare->huffman_bytes > 0,
               "%lld groups up to %lld", static_cast<long long>(bare->groups),
               static_cast<long long>(bare->max_group));
  }
  WebpHeader counted;
  Status codes = header.status();
  if (header.ok()) {
    counted = *header;
    codes = ReadWebpHuffmanCodes(webp, &counted);
    FUZZ_CHECK(codes.ok() || codes.code() == StatusCode::kInvalidArgument ||
                   codes.code() == StatusCode::kDataLoss,
               "%s", codes.ToString().c_str());
  }
  fuzz::RecordingGate gate;
  // One image per process, as the pipeline keeps one per thread: reuse must survive errors.
  static Image image;
  const Status s = DecodeWebp(webp, alpha, &image, kMaxPixels, &gate.gate());
  FUZZ_CHECK(
      s.ok() || s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kDataLoss, "%s",
      s.ToString().c_str());
  FUZZ_CHECK(gate.asked() <= 1, "the gate was asked %d times", gate.asked());
  if (gate.asked() == 1) {
    FUZZ_CHECK(header.ok() && !header->animated && codes.ok(),
               "the gate was asked for a file it refuses");
    FUZZ_CHECK(gate.estimate() == EstimateWebpDecodeBytes(counted, alpha), "estimate %lld",
               static_cast<long long>(gate.estimate()));
    const int64_t pixels = int64_t{header->width} * header->height;
    FUZZ_CHECK(static_cast<int64_t>(image.pixels.size()) <= gate.estimate() &&
                   static_cast<int64_t>(image.pixels.size()) <= pixels * 4,
               "%zu bytes of pixels over the estimate of %lld", image.pixels.size(),
               static_cast<long long>(gate.estimate()));
  }
  fuzz::CheckDecodedAsTheHeaderSays(s, header, image);
  return 0;
}

#include "formats/webp_codec.h"

#include <webp/decode.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "formats/webp_lossless_header.h"

namespace sluice {
namespace {

// libwebp's per-column state for a lossy image: its 16-row macroblock caches with the loop
// filter's extra rows (~72 bytes), the coefficients of a row of macroblocks (~50), the top
// samples, intra modes and the fancy upsampler's rows (~10): 132, rounded up.
constexpr int64_t kLossyBytesPerColumn = 160;
// A lossless image's per-column state: 16 cached ARGB rows and one top row, 4 bytes each (68),
// rounded up.
constexpr int64_t kLosslessBytesPerColumn = 128;

std::string_view StatusName(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK:
      return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "not enough data";
  }
  return "unknown status";
}

Status LibwebpError(VP8StatusCode code, std::string_view during, size_t size) {
  if (code == VP8_STATUS_NOT_ENOUGH_DATA) {
    return DataLoss("WebP data ends at byte " + std::to_string(size) + ", before the " +
                    std::string(during) + " is complete");
  }
  if (code == VP8_STATUS_OUT_OF_MEMORY) {
    return ResourceExhausted("libwebp ran out of memory decoding the " + std::string(during));
  }
  return InvalidArgument("invalid WebP " + std::string(during) + ": " +
                         std::string(StatusName(code)) + " (libwebp status " +
                         std::to_string(static_cast<int>(code)) + ")");
}

// The VP8X chunk's flags byte (after RIFF, size, WEBP, its tag and size) and its alpha bit.
constexpr size_t kVp8xFlagsAt = 20;
constexpr uint8_t kVp8xAlphaFlag = 0x10;

// The decoder's output buffer; with external memory (ours) freeing it releases nothing of ours.
class OutputBuffer {
 public:
  explicit OutputBuffer(WebPDecBuffer* buffer) : buffer_(buffer) {}
  ~OutputBuffer() { WebPFreeDecBuffer(buffer_); }
  OutputBuffer(const OutputBuffer&) = delete;
  OutputBuffer& operator=(const OutputBuffer&) = delete;

 private:
  WebPDecBuffer* buffer_;
};

uint32_t Le32(std::string_view data, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(data[at + i]);
  return v;
}

// The lossless bitstream libwebp decodes for a file: its VP8L chunk's payload, or a lossy
// image's losslessly coded alpha (the last complete ALPH chunk before the VP8 chunk, as libwebp
// takes it, after its 1-byte header).
struct LosslessPart {
  std::string_view stream;
  LosslessStream kind;
  size_t at;  // the stream's first byte in the file
  bool cut;   // the file ends inside the chunk
  const char* name;
};

std::optional<LosslessPart> FindLossless(std::string_view data) {
  constexpr uint8_t kAlphaLossless = 1;  // the ALPH header's compression method
  std::string_view alph;
  size_t alph_at = 0;
  size_t pos = 12;  // after RIFF, its size and WEBP
  while (data.size() >= 8 && pos <= data.size() - 8) {
    const std::string_view tag = data.substr(pos, 4);
    const uint64_t size = Le32(data, pos + 4);
    const size_t body = pos + 8;
    const size_t avail = static_cast<size_t>(std::min<uint64_t>(size, data.size() - body));
    if (tag == "VP8L") {
      return LosslessPart{data.substr(body, avail), LosslessStream::kVp8l, body, avail < size,
                          "VP8L"};
    }
    if (tag == "VP8 ") {
      if (alph.size() < 2 || (static_cast<uint8_t>(alph[0]) & 3) != kAlphaLossless) {
        return std::nullopt;
      }
      return LosslessPart{alph.substr(1), LosslessStream::kAlph, alph_at + 1, false, "ALPH"};
    }
    const uint64_t disk = (8 + size + 1) & ~uint64_t{1};
    if (data.size() - pos < disk) return std::nullopt;
    if (tag == "ALPH") {
      alph = data.substr(body, size);
      alph_at = body;
    }
    pos += disk;
  }
  return std::nullopt;
}

}  // namespace

std::string_view WebpCodingName(WebpCoding c) {
  switch (c) {
    case WebpCoding::kLossy:
      return "lossy";
    case WebpCoding::kLossless:
      return "lossless";
    case WebpCoding::kMixed:
      return "animated";
  }
  return "unknown";
}

Result<WebpHeader> ReadWebpHeader(std::string_view data) {
  if (!IsWebp(data)) {
    std::string m = "not a WebP image (no RIFF....WEBP at byte 0; starts with";
    for (size_t i = 0; i < data.size() && i < 4; ++i) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), " 0x%02X", static_cast<uint8_t>(data[i]));
      m += hex;
    }
    return InvalidArgument(m + ")");
  }
  WebPBitstreamFeatures f;
  const VP8StatusCode code =
      WebPGetFeatures(reinterpret_cast<const uint8_t*>(data.data()), data.size(), &f);
  if (code != VP8_STATUS_OK) return LibwebpError(code, "header", data.size());
  if (f.width <= 0 || f.height <= 0) {
    return InvalidArgument("WebP header size " + std::to_string(f.width) + "x" +
                           std::to_string(f.height) + " is empty");
  }
  // A VP8X that ends before any image chunk: libwebp reads its canvas and says OK, format 0.
  if (f.format == 0 && f.has_animation == 0) {
    return DataLoss("WebP data ends at byte " + std::to_string(data.size()) +
                    " with no VP8/VP8L image data");
  }
  WebpHeader h;
  h.width = f.width;
  h.height = f.height;
  h.alpha_decoded = f.has_alpha != 0;
  // An extended file's alpha is what its VP8X flags say, as Pillow (its WebPDemux) takes it;
  // libwebp also counts an ALPH chunk (or a VP8L alpha bit) the flags leave out.
  const bool extended = data.size() > kVp8xFlagsAt && data.substr(12, 4) == "VP8X";
  h.has_alpha =
      extended ? (static_cast<uint8_t>(data[kVp8xFlagsAt]) & kVp8xAlphaFlag) != 0 : h.alpha_decoded;
  h.animated = f.has_animation != 0;
  h.coding = h.animated      ? WebpCoding::kMixed
             : f.format == 2 ? WebpCoding::kLossless
                             : WebpCoding::kLossy;
  return h;
}

Status ReadWebpHuffmanCodes(std::string_view data, WebpHeader* header) {
  header->huffman_bytes = 0;
  if (header->animated) return Status::OK();
  const std::optional<LosslessPart> part = FindLossless(data);
  if (!part) return Status::OK();
  Result<LosslessCodes> codes =
      ReadLosslessCodes(part->stream, header->width, header->height, part->kind);
  if (codes.ok()) {
    header->huffman_bytes = codes->huffman_bytes;
    return Status::OK();
  }
  if (codes.status().code() == StatusCode::kDataLoss && part->cut) {
    return DataLoss("WebP data ends at byte " + std::to_string(data.size()) +
                    ", before the lossless header is complete");
  }
  return InvalidArgument("invalid WebP " + std::string(part->name) + " chunk at byte " +
                         std::to_string(part->at) + ": " + codes.status().message());
}

int64_t EstimateWebpDecodeBytes(const WebpHeader& header, Alpha alpha) {
  const int64_t w = header.width;
  const int64_t h = header.height;
  const bool rgba = header.has_alpha && alpha != Alpha::kDrop;
  int64_t bytes = w * h * (rgba ? 4 : 3) + kWebpFixedBytes;
  // A lossless image (or a lossy one's alpha, which may be coded losslessly): the ARGB image,
  // 4 bytes a pixel; its transforms' and entropy image's sub-images, each at most a 4x4
  // subsample of 4-byte pixels (a quarter byte a pixel, three of them); its Huffman tables.
  const bool lossless_argb = header.coding != WebpCoding::kLossy || header.alpha_decoded;
  if (lossless_argb) {
    bytes += w * h * 4 + w * h * 3 / 4 + w * kLosslessBytesPerColumn + header.huffman_bytes;
  }
  if (header.coding != WebpCoding::kLossless) {
    bytes += w * kLossyBytesPerColumn;
    if (header.alpha_decoded) bytes += w * h;  // the decoded alpha plane
  }
  return bytes;
}

Status DecodeWebp(std::string_view data, Alpha alpha, Image* out, int64_t max_pixels,
                  const DecodeMemoryGate* gate) {
  ASSIGN_OR_RETURN(WebpHeader header, ReadWebpHeader(data));
  if (header.animated) {
    return InvalidArgument("animated WebP (" + std::to_string(header.width) + "x" +
                           std::to_string(header.height) +
                           " canvas) is not decoded: Sluice reads still images only");
  }
  const int64_t pixels = int64_t{header.width} * header.height;
  if (pixels > max_pixels) {
    return InvalidArgument("WebP of " + std::to_string(header.width) + "x" +
                           std::to_string(header.height) + " = " + std::to_string(pixels) +
                           " pixels exceeds max_pixels " + std::to_string(max_pixels));
  }
  RETURN_IF_ERROR(ReadWebpHuffmanCodes(data, &header));
  if (gate != nullptr) RETURN_IF_ERROR((*gate)(EstimateWebpDecodeBytes(header, alpha)));

  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return Internal("libwebp's decoder ABI does not match the headers Sluice was built with");
  }
  OutputBuffer release(&config.output);
  const int w = header.width;
  const int h = header.height;
  // RGBA only when compositing: the estimate counts on it.
  const bool rgba = header.has_alpha && alpha != Alpha::kDrop;
  const size_t stride = static_cast<size_t>(w) * (rgba ? 4 : 3);
  if (rgba) {
    // Room for the RGBA image, exactly (growing from RGB could double the capacity).
    out->pixels.clear();
    out->pixels.reserve(stride * h);
    out->pixels.resize(stride * h);
  } else {
    out->Resize(w, h);
  }
  config.output.colorspace = rgba ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out->pixels.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = stride * h;
  const VP8StatusCode code =
      WebPDecode(reinterpret_cast<const uint8_t*>(data.data()), data.size(), &config);
  if (code != VP8_STATUS_OK) return LibwebpError(code, "image", data.size());
  if (config.output.width != w || config.output.height != h) {
    return Internal("libwebp decoded " + std::to_string(config.output.width) + "x" +
                    std::to_string(config.output.height) + " where the header said " +
                    std::to_string(w) + "x" + std::to_string(h));
  }
  if (rgba) FlattenRgba(out->pixels.data(), static_cast<size_t>(w) * h, alpha, out->pixels.data());
  out->Resize(w, h);
  return Status::OK();
}

}  // namespace sluice

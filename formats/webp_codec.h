// WebP decode to packed RGB with libwebp (Debian's, the decoder Pillow links): lossy (VP8) and
// lossless (VP8L) still images, with or without alpha. libwebp reports every error as a status
// code; they become Status here, and nothing calls abort() or exit().
//
// What the pixels are (PIL is the reference, tests/python/test_pil_webp.py, byte for byte):
// - PIL's Image.open(f).convert("RGB"): libwebp's RGB with its default options (fancy upsampling
//   of lossy chroma, no dithering), the alpha dropped.
// - Alpha per Alpha (formats/alpha.h): dropped, or composited onto an opaque white or black
//   background exactly as a PNG's is, which equals PIL's Image.alpha_composite.
// - A VP8X file is opaque when its alpha flag is clear, as Pillow takes it, even with an ALPH
//   chunk (which libwebp would apply).
// - An animated WebP is refused (InvalidArgument saying so): PIL's Image.open gives its first
//   frame, composited on its canvas; a training image is a still, and a silently partial one is
//   worse than a clear refusal.
// - Data cut short is refused (DataLoss naming where it ends), as PIL refuses it.
#pragma once

#include <cstdint>
#include <string_view>

#include "formats/alpha.h"
#include "formats/image_ops.h"
#include "formats/jpeg_codec.h"
#include "formats/status.h"

namespace sluice {

// A RIFF container ("RIFF", 4 size bytes, "WEBP") at byte 0.
inline bool IsWebp(std::string_view data) {
  return data.size() >= 12 && data.substr(0, 4) == "RIFF" && data.substr(8, 4) == "WEBP";
}

// How the image is coded: WebPBitstreamFeatures::format, with an animation of any frames kMixed.
enum class WebpCoding { kLossy, kLossless, kMixed };
std::string_view WebpCodingName(WebpCoding c);  // "lossy", "lossless", "animated"

struct WebpHeader {
  int width = 0;  // the canvas, for an animation
  int height = 0;
  // Whether the image has alpha as Pillow sees it (a VP8X file: its alpha flag); decoded as RGB
  // without it.
  bool has_alpha = false;
  // Whether libwebp decodes an alpha plane (an ALPH chunk, a VP8X alpha flag or a VP8L alpha
  // bit), whatever has_alpha says: its memory is in the estimate.
  bool alpha_decoded = false;
  bool animated = false;
  WebpCoding coding = WebpCoding::kLossy;
  // What libwebp allocates at once for the Huffman tables of the lossless bitstream it decodes
  // (the VP8L image, or a lossy image's lossless alpha): set by ReadWebpHuffmanCodes.
  int64_t huffman_bytes = 0;
};

// Reads the RIFF header and the chunks up to the bitstream's own header (libwebp's
// WebPGetFeatures: nothing is decoded). InvalidArgument when data is not a WebP (naming what it
// starts with) or the headers are malformed; DataLoss when data ends inside them or a still
// image's chunks end before its VP8/VP8L data.
Result<WebpHeader> ReadWebpHeader(std::string_view data);

// Reads the lossless bitstream libwebp would decode for this file (its VP8L chunk, or the ALPH
// chunk of a lossy image with losslessly coded alpha) as far as its Huffman codes
// (formats/webp_lossless_header.h) and sets header->huffman_bytes; 0 for a lossy image without
// one or an animation. DataLoss when the file ends first (naming the byte, as DecodeWebp does);
// InvalidArgument naming the chunk when the bitstream is malformed. Holds up to a quarter byte
// a pixel (the entropy image; 25 MB at the default max_pixels) while it runs, before the gate is
// asked: bounded by max_pixels, not by the decode share. The count is of the tables libwebp
// writes: where every code of every group is at its largest size, Debian's libwebp 1.2.4 (with
// the CVE-2023-4863 fix) also reserves a second segment as large, which it never touches (address
// space, not memory). REQUIRES: header is ReadWebpHeader(data)'s.
Status ReadWebpHuffmanCodes(std::string_view data, WebpHeader* header);

// Bytes a decode of an image with this header holds at once, for DecodeMemoryGate: the RGB
// pixels (RGBA while alpha to composite is decoded), libwebp's per-column row caches and fixed
// state (kWebpFixedBytes), and for lossless pixels (or alpha, which may be coded losslessly) its
// whole ARGB image, its transforms' sub-images and the Huffman tables of every group its entropy
// image names (header.huffman_bytes, from ReadWebpHuffmanCodes). Measured with every allocation
// counted (tests/formats/webp_codec_test.cc): an 800x600 photograph takes 7.4 bytes a pixel
// lossless (the estimate counts 7.75, the tables and kWebpFixedBytes) and 3.2 lossy (3, plus the
// per-column rows and kWebpFixedBytes); a crafted file whose tiles each name their own group
// (thousands of tables, 20 KB each) stays within it too.
int64_t EstimateWebpDecodeBytes(const WebpHeader& header, Alpha alpha);

// libwebp's decoder structs and the sub-images' Huffman tables, whatever the size.
inline constexpr int64_t kWebpFixedBytes = int64_t{2} << 20;

// Decodes a still WebP into packed RGB (see the top of this file for what the pixels are). A
// header over max_pixels is refused before anything is allocated, naming the size; then the gate,
// if any, is asked once for EstimateWebpDecodeBytes. An animation is InvalidArgument; damage is
// InvalidArgument with libwebp's status; data that ends before the image does is DataLoss naming
// the byte where it ends. out's buffer is reused: it grows to exactly what this image needs.
Status DecodeWebp(std::string_view data, Alpha alpha, Image* out,
                  int64_t max_pixels = kDefaultMaxPixels, const DecodeMemoryGate* gate = nullptr);

}  // namespace sluice

// The front of a WebP lossless bitstream (a VP8L chunk, or a lossy image's losslessly coded
// ALPH chunk) read as far as libwebp's decoder reads it before it allocates its Huffman tables:
// the transforms with their sub-images, the colour cache size and the entropy (meta-Huffman)
// image, each decoded per the WebP lossless specification. No header says how many Huffman
// groups an image uses; libwebp 1.2.4 (src/dec/vp8l_dec.c, ReadHuffmanCodes) allocates the tables
// of every group the entropy image names at once, up to 65,536 of them at 20 KB each, before it
// decodes a pixel. This reader counts them as it does, so the decode can be gated on them.
//
// Every read is bounds-checked. The work is bounded by the image's size: each sub-image is at
// most a 4x4 subsample of the image (the colour map 256 pixels), decoded once, and the entropy
// image, the one kept, takes 4 bytes a pixel of it until the reader returns.
#pragma once

#include <cstdint>
#include <string_view>

#include "formats/status.h"

namespace sluice {

enum class LosslessStream {
  kVp8l,  // a VP8L chunk's payload: its 5-byte header (signature, size, alpha, version) first
  kAlph,  // an ALPH chunk's payload after its 1-byte header: the image stream alone
};

struct LosslessCodes {
  int color_cache_bits = 0;   // 0: no colour cache
  int64_t groups = 1;         // Huffman groups libwebp builds tables for
  int64_t max_group = 0;      // the highest group the entropy image names
  int64_t huffman_bytes = 0;  // libwebp's allocation for them: see LosslessHuffmanBytes
};

// The bytes libwebp 1.2.4 allocates at once for `groups` Huffman groups with this colour cache:
// kTableSize[color_cache_bits] 4-byte table entries and a 568-byte HTreeGroup each, and, when it
// remaps the groups (more than 1000 named, or more than the image has pixels), a 4-byte map entry
// for each index up to the highest.
int64_t LosslessHuffmanBytes(int color_cache_bits, int64_t groups, int64_t max_group,
                             bool remapped);

// Reads `stream`, the bitstream of a width x height image, up to its Huffman codes and counts
// the groups. DataLoss when the stream ends first (the message names the byte of the stream);
// InvalidArgument when it is malformed (a bad signature or size, a transform repeated, a colour
// cache over 11 bits, an invalid Huffman code, a backward reference outside the image), naming
// the field and the byte. REQUIRES: 1 <= width, height <= 16384.
Result<LosslessCodes> ReadLosslessCodes(std::string_view stream, int width, int height,
                                        LosslessStream kind);

}  // namespace sluice

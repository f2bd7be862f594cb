#include "formats/webp_lossless_header.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace sluice {
namespace {

constexpr int kMaxCodeLength = 15;
constexpr int kNumLiteralCodes = 256;
constexpr int kNumLengthCodes = 24;
constexpr int kNumDistanceCodes = 40;
constexpr int kMaxCacheBits = 11;
constexpr int kNumCodeLengthCodes = 19;
constexpr std::array<int, kNumCodeLengthCodes> kCodeLengthCodeOrder = {
    17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
// libwebp's kTableSize: the most table entries one group's five codes take at 8 root bits
// (630 for each of red, blue and alpha, 410 for distance, then green by colour cache bits).
constexpr int kFixedTableSize = 630 * 3 + 410;
constexpr std::array<int, kMaxCacheBits + 1> kTableSize = {
    kFixedTableSize + 654, kFixedTableSize + 656,  kFixedTableSize + 658,  kFixedTableSize + 662,
    kFixedTableSize + 670, kFixedTableSize + 686,  kFixedTableSize + 718,  kFixedTableSize + 782,
    kFixedTableSize + 912, kFixedTableSize + 1168, kFixedTableSize + 1680, kFixedTableSize + 2704};
constexpr int64_t kHuffmanCodeBytes = 4;   // HuffmanCode: uint8_t bits, uint16_t value
constexpr int64_t kHTreeGroupBytes = 568;  // five pointers, four ints, a 64-entry packed table
// libwebp remaps the groups when the highest named exceeds this (or the image's pixels).
constexpr int64_t kRemapAbove = 1000;
constexpr std::array<uint8_t, 120> kCodeToPlane = {
    0x18, 0x07, 0x17, 0x19, 0x28, 0x06, 0x27, 0x29, 0x16, 0x1a, 0x26, 0x2a, 0x38, 0x05, 0x37,
    0x39, 0x15, 0x1b, 0x36, 0x3a, 0x25, 0x2b, 0x48, 0x04, 0x47, 0x49, 0x14, 0x1c, 0x35, 0x3b,
    0x46, 0x4a, 0x24, 0x2c, 0x58, 0x45, 0x4b, 0x34, 0x3c, 0x03, 0x57, 0x59, 0x13, 0x1d, 0x56,
    0x5a, 0x23, 0x2d, 0x44, 0x4c, 0x55, 0x5b, 0x33, 0x3d, 0x68, 0x02, 0x67, 0x69, 0x12, 0x1e,
    0x66, 0x6a, 0x22, 0x2e, 0x54, 0x5c, 0x43, 0x4d, 0x65, 0x6b, 0x32, 0x3e, 0x78, 0x01, 0x77,
    0x79, 0x53, 0x5d, 0x11, 0x1f, 0x64, 0x6c, 0x42, 0x4e, 0x76, 0x7a, 0x21, 0x2f, 0x75, 0x7b,
    0x31, 0x3f, 0x63, 0x6d, 0x52, 0x5e, 0x00, 0x74, 0x7c, 0x41, 0x4f, 0x10, 0x20, 0x62, 0x6e,
    0x30, 0x73, 0x7d, 0x51, 0x5f, 0x40, 0x72, 0x7e, 0x61, 0x6f, 0x50, 0x71, 0x7f, 0x60, 0x70};

int SubSampleSize(int size, int bits) { return (size + (1 << bits) - 1) >> bits; }

// The bits of a stream, least significant first. A read past the end returns zeros and marks
// the reader ended, as libwebp's does; the caller checks ended() where libwebp checks eos.
class BitReader {
 public:
  explicit BitReader(std::string_view data) : data_(data), total_(uint64_t{data.size()} * 8) {}

  // The next n bits (n <= 24) without consuming them; zeros past the end.
  uint32_t Peek(int n) const {
    uint64_t v = 0;
    const uint64_t byte = pos_ >> 3;
    for (uint64_t i = 0; i < 5 && byte + i < data_.size(); ++i) {
      v |= uint64_t{static_cast<uint8_t>(data_[byte + i])} << (8 * i);
    }
    return static_cast<uint32_t>((v >> (pos_ & 7)) & ((uint64_t{1} << n) - 1));
  }
  void Skip(int n) {
    pos_ += n;
    if (pos_ > total_) {
      ended_ = true;
      pos_ = total_;
    }
  }
  uint32_t Read(int n) {
    if (pos_ + n > total_) {
      ended_ = true;
      pos_ = total_;
      return 0;
    }
    const uint32_t v = Peek(n);
    pos_ += n;
    return v;
  }
  bool ended() const { return ended_; }
  uint64_t byte() const { return pos_ >> 3; }

 private:
  std::string_view data_;
  uint64_t total_;
  uint64_t pos_ = 0;
  bool ended_ = false;
};

// A canonical Huffman code, looked up by its longest code's worth of upcoming bits.
class HuffmanCode {
 public:
  // Builds the code of these lengths as libwebp's BuildHuffmanTable accepts them: lengths up to
  // 15, at least one symbol, and either exactly one symbol (a 0-bit code) or a complete tree.
  bool Build(const std::vector<int>& lengths) {
    std::array<int, kMaxCodeLength + 1> count{};
    for (int l : lengths) {
      if (l < 0 || l > kMaxCodeLength) return false;
      ++count[l];
    }
    if (count[0] == static_cast<int>(lengths.size())) return false;
    for (int len = 1; len < kMaxCodeLength; ++len) {
      if (count[len] > (1 << len)) return false;
    }
    const int symbols = static_cast<int>(lengths.size()) - count[0];
    if (symbols == 1) {
      max_length_ = 0;
      for (size_t s = 0; s < lengths.size(); ++s) {
        if (lengths[s] > 0) single_ = static_cast<int>(s);
      }
      return true;
    }
    int num_nodes = 1;
    int num_open = 1;
    max_length_ = 0;
    for (int len = 1; len <= kMaxCodeLength; ++len) {
      num_open <<= 1;
      num_nodes += num_open;
      num_open -= count[len];
      if (num_open < 0) return false;
      if (count[len] > 0) max_length_ = len;
    }
    if (num_nodes != 2 * symbols - 1) return false;
    std::array<uint32_t, kMaxCodeLength + 2> next{};
    uint32_t code = 0;
    for (int len = 1; len <= kMaxCodeLength; ++len) {
      code = (code + (len > 1 ? count[len - 1] : 0)) << 1;
      next[len] = code;
    }
    table_.assign(size_t{1} << max_length_, 0);
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int len = lengths[s];
      if (len == 0) continue;
      const uint32_t c = next[len]++;
      uint32_t reversed = 0;
      for (int i = 0; i < len; ++i) reversed |= ((c >> i) & 1) << (len - 1 - i);
      for (uint32_t k = reversed; k < table_.size(); k += uint32_t{1} << len) {
        table_[k] = (static_cast<uint32_t>(s) << 4) | static_cast<uint32_t>(len);
      }
    }
    return true;
  }

  int Read(BitReader* br) const {
    if (max_length_ == 0) return single_;
    const uint32_t entry = table_[br->Peek(max_length_)];
    br->Skip(static_cast<int>(entry & 15));
    return static_cast<int>(entry >> 4);
  }

 private:
  int max_length_ = 0;
  int single_ = 0;
  std::vector<uint32_t> table_;  // (symbol << 4) | length
};

class Reader {
 public:
  explicit Reader(std::string_view stream) : br_(stream) {}

  // libwebp's DecodeImageStream: at level 0 the transforms, colour cache and entropy image, the
  // groups counted into *codes; below it a sub-image, decoded into *pixels when given.
  Status ReadImageStream(int xsize, int ysize, bool level0, LosslessCodes* codes,
                         std::vector<uint32_t>* pixels) {
    int transform_xsize = xsize;
    if (level0) {
      unsigned seen = 0;
      while (br_.Read(1) != 0) {
        const unsigned type = br_.Read(2);
        if ((seen & (1u << type)) != 0)
          return Invalid("transform " + std::to_string(type) + " is repeated");
        seen |= 1u << type;
        if (type == 0 || type == 1) {  // predictor, cross-colour: a sub-image of their modes
          const int bits = static_cast<int>(br_.Read(3)) + 2;
          RETURN_IF_ERROR(ReadImageStream(SubSampleSize(transform_xsize, bits),
                                          SubSampleSize(ysize, bits), false, nullptr, nullptr));
        } else if (type == 3) {  // colour indexing: a colour map; pixels packed by its size
          const int colors = static_cast<int>(br_.Read(8)) + 1;
          const int bits = colors > 16 ? 0 : colors > 4 ? 1 : colors > 2 ? 2 : 3;
          RETURN_IF_ERROR(ReadImageStream(colors, 1, false, nullptr, nullptr));
          transform_xsize = SubSampleSize(transform_xsize, bits);
        }
      }
    }
    int cache_bits = 0;
    if (br_.Read(1) != 0) {
      cache_bits = static_cast<int>(br_.Read(4));
      if (cache_bits < 1 || cache_bits > kMaxCacheBits) {
        return Invalid("colour cache of " + std::to_string(cache_bits) + " bits");
      }
    }
    if (!level0) return DecodeSubImage(xsize, ysize, cache_bits, pixels);

    codes->color_cache_bits = cache_bits;
    codes->groups = 1;
    codes->max_group = 0;
    bool remapped = false;
    if (br_.Read(1) != 0) {  // an entropy image: a group for each tile
      const int bits = static_cast<int>(br_.Read(3)) + 2;
      std::vector<uint32_t> entropy;
      RETURN_IF_ERROR(ReadImageStream(SubSampleSize(transform_xsize, bits),
                                      SubSampleSize(ysize, bits), false, nullptr, &entropy));
      int64_t groups_max = 1;
      for (uint32_t p : entropy)
        groups_max = std::max<int64_t>(groups_max, ((p >> 8) & 0xffff) + 1);
      codes->max_group = groups_max - 1;
      codes->groups = groups_max;
      if (groups_max > kRemapAbove || groups_max > int64_t{transform_xsize} * ysize) {
        remapped = true;
        std::vector<bool> used(static_cast<size_t>(groups_max), false);
        codes->groups = 0;
        for (uint32_t p : entropy) {
          const size_t g = (p >> 8) & 0xffff;
          if (!used[g]) {
            used[g] = true;
            ++codes->groups;
          }
        }
      }
    }
    if (br_.ended()) return Ended();
    codes->huffman_bytes =
        LosslessHuffmanBytes(cache_bits, codes->groups, codes->max_group, remapped);
    return Status::OK();
  }

  // The VP8L header: signature 0x2f, 14-bit width - 1 and height - 1, alpha bit, 3-bit version.
  Status ReadVp8lHeader(int width, int height) {
    if (br_.Read(8) != 0x2f) return Invalid("signature is not 0x2F");
    const int w = static_cast<int>(br_.Read(14)) + 1;
    const int h = static_cast<int>(br_.Read(14)) + 1;
    br_.Read(1);
    if (br_.Read(3) != 0) return Invalid("version is not 0");
    if (br_.ended()) return Ended();
    if (w != width || h != height) {
      return Invalid("size " + std::to_string(w) + "x" + std::to_string(h) +
                     " is not the header's " + std::to_string(width) + "x" +
                     std::to_string(height));
    }
    return Status::OK();
  }

 private:
  Status Invalid(const std::string& what) const {
    // A read past the end explains whatever failed after it (libwebp says so too).
    if (br_.ended()) return Ended();
    return InvalidArgument("invalid lossless bitstream near byte " + std::to_string(br_.byte()) +
                           ": " + what);
  }
  Status Ended() const {
    return DataLoss("lossless bitstream ends at byte " + std::to_string(br_.byte()) +
                    ", before its Huffman codes");
  }

  // libwebp's ReadHuffmanCode: a simple code (one or two symbols, given directly) or code
  // lengths coded with a code-length code, run-length repeats included.
  Status ReadCode(int alphabet_size, HuffmanCode* code) {
    std::vector<int> lengths(static_cast<size_t>(alphabet_size), 0);
    if (br_.Read(1) != 0) {
      const int symbols = static_cast<int>(br_.Read(1)) + 1;
      const int first_bits = br_.Read(1) == 0 ? 1 : 8;
      int symbol = static_cast<int>(br_.Read(first_bits));
      if (symbol < alphabet_size) lengths[symbol] = 1;
      if (symbols == 2) {
        symbol = static_cast<int>(br_.Read(8));
        if (symbol < alphabet_size) lengths[symbol] = 1;
      }
    } else {
      std::vector<int> code_length_lengths(kNumCodeLengthCodes, 0);
      const int num_codes = static_cast<int>(br_.Read(4)) + 4;
      for (int i = 0; i < num_codes; ++i) {
        code_length_lengths[kCodeLengthCodeOrder[i]] = static_cast<int>(br_.Read(3));
      }
      HuffmanCode code_length_code;
      if (!code_length_code.Build(code_length_lengths)) return Invalid("invalid code-length code");
      int max_symbol = alphabet_size;
      if (br_.Read(1) != 0) {
        const int length_bits = 2 + 2 * static_cast<int>(br_.Read(3));
        max_symbol = 2 + static_cast<int>(br_.Read(length_bits));
        if (max_symbol > alphabet_size) return Invalid("code lengths past the alphabet");
      }
      int symbol = 0;
      int previous = 8;
      while (symbol < alphabet_size) {
        if (max_symbol-- == 0) break;
        if (br_.ended()) return Ended();
        const int code_length = code_length_code.Read(&br_);
        if (code_length < 16) {
          lengths[symbol++] = code_length;
          if (code_length != 0) previous = code_length;
          continue;
        }
        static constexpr std::array<int, 3> kExtraBits = {2, 3, 7};
        static constexpr std::array<int, 3> kRepeatOffsets = {3, 3, 11};
        const int slot = code_length - 16;
        const int repeat = static_cast<int>(br_.Read(kExtraBits[slot])) + kRepeatOffsets[slot];
        if (symbol + repeat > alphabet_size) return Invalid("code length repeat past the alphabet");
        const int length = code_length == 16 ? previous : 0;
        for (int i = 0; i < repeat; ++i) lengths[symbol++] = length;
      }
    }
    if (br_.ended()) return Ended();
    if (!code->Build(lengths)) return Invalid("invalid Huffman code lengths");
    return Status::OK();
  }

  // libwebp's GetCopyDistance (lengths are coded alike).
  int CopyDistance(int symbol) {
    if (symbol < 4) return symbol + 1;
    const int extra_bits = (symbol - 2) >> 1;
    const int offset = (2 + (symbol & 1)) << extra_bits;
    return offset + static_cast<int>(br_.Read(extra_bits)) + 1;
  }

  // A sub-image: one group of five codes, then its pixels (literals, backward references and
  // colour cache hits), kept in *pixels when given.
  Status DecodeSubImage(int xsize, int ysize, int cache_bits, std::vector<uint32_t>* pixels) {
    const int cache_size = cache_bits > 0 ? 1 << cache_bits : 0;
    std::array<HuffmanCode, 5> codes;  // green (with lengths and cache), red, blue, alpha, distance
    const std::array<int, 5> alphabet = {kNumLiteralCodes + kNumLengthCodes + cache_size,
                                         kNumLiteralCodes, kNumLiteralCodes, kNumLiteralCodes,
                                         kNumDistanceCodes};
    for (size_t i = 0; i < codes.size(); ++i) RETURN_IF_ERROR(ReadCode(alphabet[i], &codes[i]));
    // The pixels are kept for backward references and the cache even when not returned.
    const int64_t total = int64_t{xsize} * ysize;
    std::vector<uint32_t> local;
    std::vector<uint32_t>& data = pixels != nullptr ? *pixels : local;
    data.assign(static_cast<size_t>(total), 0);
    std::vector<uint32_t> cache(static_cast<size_t>(cache_size), 0);
    int64_t at = 0;
    int64_t cached = 0;  // pixels before this one are in the cache
    auto fill_cache = [&] {
      for (; cached < at; ++cached) {
        cache[(data[cached] * 0x1e35a7bdu) >> (32 - cache_bits)] = data[cached];
      }
    };
    while (at < total) {
      const int green = codes[0].Read(&br_);
      if (br_.ended()) return Ended();
      if (green < kNumLiteralCodes) {
        const uint32_t red = codes[1].Read(&br_);
        const uint32_t blue = codes[2].Read(&br_);
        const uint32_t alpha = codes[3].Read(&br_);
        if (br_.ended()) return Ended();
        data[at++] = (alpha << 24) | (red << 16) | (static_cast<uint32_t>(green) << 8) | blue;
      } else if (green < kNumLiteralCodes + kNumLengthCodes) {
        const int length = CopyDistance(green - kNumLiteralCodes);
        const int plane_code = CopyDistance(codes[4].Read(&br_));
        if (br_.ended()) return Ended();
        int64_t distance;
        if (plane_code > static_cast<int>(kCodeToPlane.size())) {
          distance = plane_code - static_cast<int>(kCodeToPlane.size());
        } else {
          const int dist_code = kCodeToPlane[plane_code - 1];
          distance = int64_t{dist_code >> 4} * xsize + (8 - (dist_code & 0xf));
          if (distance < 1) distance = 1;
        }
        if (at < distance || total - at < length) {
          return Invalid("backward reference outside the image");
        }
        for (int i = 0; i < length; ++i, ++at) data[at] = data[at - distance];
      } else {
        if (cache_bits == 0) return Invalid("colour cache symbol without a cache");
        fill_cache();
        data[at] = cache[green - kNumLiteralCodes - kNumLengthCodes];
        ++at;
      }
      if (cache_bits > 0) fill_cache();
    }
    return Status::OK();
  }

  BitReader br_;
};

}  // namespace

int64_t LosslessHuffmanBytes(int color_cache_bits, int64_t groups, int64_t max_group,
                             bool remapped) {
  int64_t bytes = groups * (kTableSize[color_cache_bits] * kHuffmanCodeBytes + kHTreeGroupBytes);
  if (remapped) bytes += (max_group + 1) * 4;
  return bytes;
}

Result<LosslessCodes> ReadLosslessCodes(std::string_view stream, int width, int height,
                                        LosslessStream kind) {
  Reader reader(stream);
  if (kind == LosslessStream::kVp8l) RETURN_IF_ERROR(reader.ReadVp8lHeader(width, height));
  LosslessCodes codes;
  RETURN_IF_ERROR(reader.ReadImageStream(width, height, true, &codes, nullptr));
  return codes;
}

}  // namespace sluice

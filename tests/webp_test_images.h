// WebPs for tests, written with libwebp's encoder (not through the decoder under test):
// photograph-like RGBA pixels, still images of each coding, and an animation built chunk by chunk
// (RIFF, VP8X, ANIM, ANMF) around a lossless frame.
#pragma once

#include <webp/encode.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::testing {

// w * h RGBA pixels: smooth gradients with a little noise (how a photograph compresses), and an
// alpha that runs from 0 to 255 across the image with fully opaque and fully transparent parts.
inline std::vector<uint8_t> SmoothPixels(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-12, 12);
  auto clamp = [](int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); };
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * 4);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* px = &p[(static_cast<size_t>(y) * w + x) * 4];
      px[0] = clamp(x * 255 / std::max(w - 1, 1) + noise(rng));
      px[1] = clamp(y * 255 / std::max(h - 1, 1) + noise(rng));
      px[2] = clamp((x + y) * 127 / std::max(w + h - 2, 1) + 64 + noise(rng));
      px[3] = clamp((x * 2 - w / 2) * 255 / std::max(w, 1));
    }
  }
  return p;
}

// w * h RGBA pixels in 32x32 tiles, each of noise in its own narrow range of values: content
// whose lossless coding uses hundreds of Huffman groups (each tile's statistics differ).
inline std::vector<uint8_t> BlockyPixels(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * 4, 255);
  for (int ty = 0; ty < h; ty += 32) {
    for (int tx = 0; tx < w; tx += 32) {
      const int lo = static_cast<int>(rng() % 200);
      const int span = 2 + static_cast<int>(rng() % 54);
      for (int y = ty; y < std::min(h, ty + 32); ++y) {
        for (int x = tx; x < std::min(w, tx + 32); ++x) {
          uint8_t* px = &p[(static_cast<size_t>(y) * w + x) * 4];
          for (int c = 0; c < 3; ++c) px[c] = static_cast<uint8_t>(lo + rng() % span);
        }
      }
    }
  }
  return p;
}

enum class WebpCodec {
  kLossy,          // quality 90
  kLossless,       // the encoder may change the colour of fully transparent pixels
  kLosslessExact,  // every pixel's colour kept, transparent or not
};

// Encodes w * h RGBA pixels (tightly packed); with channels 3 their alpha is left out (the file
// has none).
inline std::string EncodeWebp(const uint8_t* rgba, int w, int h, int channels, WebpCodec codec) {
  WebPConfig config;
  WebPPicture picture;
  if (!WebPConfigInit(&config) || !WebPPictureInit(&picture)) {
    throw std::runtime_error("libwebp version mismatch");
  }
  config.lossless = codec != WebpCodec::kLossy;
  config.exact = codec == WebpCodec::kLosslessExact;
  config.quality = codec == WebpCodec::kLossy ? 90 : 75;
  picture.use_argb = config.lossless;
  picture.width = w;
  picture.height = h;
  std::vector<uint8_t> rgb;
  int ok = 0;
  if (channels == 4) {
    ok = WebPPictureImportRGBA(&picture, rgba, w * 4);
  } else {
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
      rgb.insert(rgb.end(), rgba + 4 * i, rgba + 4 * i + 3);
    }
    ok = WebPPictureImportRGB(&picture, rgb.data(), w * 3);
  }
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  ok = ok && WebPEncode(&config, &picture);
  WebPPictureFree(&picture);
  std::string out(reinterpret_cast<const char*>(writer.mem), writer.size);
  WebPMemoryWriterClear(&writer);
  if (!ok) throw std::runtime_error("WebPEncode failed");
  return out;
}

inline std::string Le(uint32_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

inline std::string RiffChunk(const std::string& fourcc, const std::string& body) {
  std::string c = fourcc + Le(static_cast<uint32_t>(body.size()), 4) + body;
  if (body.size() % 2 == 1) c += '\0';
  return c;
}

// A two-frame animation of a w x h canvas, each frame a whole-canvas lossless image.
inline std::string AnimatedWebp(int w, int h) {
  const std::vector<uint8_t> rgba = SmoothPixels(w, h, 99);
  const std::string still = EncodeWebp(rgba.data(), w, h, 3, WebpCodec::kLossless);
  const std::string frame_chunk = still.substr(12);  // the VP8L chunk after RIFF....WEBP
  std::string frames;
  for (int i = 0; i < 2; ++i) {
    // X/2, Y/2, width-1, height-1, duration (24 bits each), then flags: blend, no dispose.
    const std::string header = Le(0, 3) + Le(0, 3) + Le(static_cast<uint32_t>(w - 1), 3) +
                               Le(static_cast<uint32_t>(h - 1), 3) + Le(100, 3) + Le(0, 1);
    frames += RiffChunk("ANMF", header + frame_chunk);
  }
  const std::string vp8x =
      RiffChunk("VP8X", Le(0x02, 1) + Le(0, 3) + Le(static_cast<uint32_t>(w - 1), 3) +
                            Le(static_cast<uint32_t>(h - 1), 3));
  const std::string anim = RiffChunk("ANIM", Le(0xFFFFFFFF, 4) + Le(0, 2));
  const std::string body = "WEBP" + vp8x + anim + frames;
  return "RIFF" + Le(static_cast<uint32_t>(body.size()), 4) + body;
}

// RIFF, WEBP and a VP8X chunk of a w x h canvas with these flags (0x10: alpha), nothing after.
inline std::string Vp8xOnly(int w, int h, uint8_t flags) {
  const std::string body =
      "WEBP" + RiffChunk("VP8X", Le(flags, 1) + Le(0, 3) + Le(static_cast<uint32_t>(w - 1), 3) +
                                     Le(static_cast<uint32_t>(h - 1), 3));
  return "RIFF" + Le(static_cast<uint32_t>(body.size()), 4) + body;
}

// Bits written least significant first, as a WebP lossless bitstream reads them.
class LosslessBitWriter {
 public:
  // The low `bits` bits of value (bits <= 64).
  void Put(uint64_t value, int bits) {
    for (int i = 0; i < bits; ++i) {
      if (count_ % 8 == 0) bytes_ += '\0';
      bytes_.back() = static_cast<char>(bytes_.back() | (((value >> i) & 1) << (count_ % 8)));
      ++count_;
    }
  }
  // A simple code of one symbol: 0 bits a use.
  void OneSymbolCode(int symbol) {
    Put(1, 1);
    Put(0, 1);
    if (symbol < 2) {
      Put(0, 1);
      Put(static_cast<uint32_t>(symbol), 1);
    } else {
      Put(1, 1);
      Put(static_cast<uint32_t>(symbol), 8);
    }
  }
  // A normal code giving symbols 0..255 8 bits each (the code-length code has one symbol, 8).
  void Flat256Code(int alphabet_size) {
    static constexpr int kOrder[19] = {17, 18, 0, 1,  2,  3,  4,  5,  16, 6,
                                       7,  8,  9, 10, 11, 12, 13, 14, 15};
    Put(0, 1);
    Put(19 - 4, 4);
    for (int c : kOrder) Put(c == 8 ? 1 : 0, 3);
    if (alphabet_size > 256) {
      Put(1, 1);    // a count of code lengths follows
      Put(3, 3);    // in 2 + 2 * 3 = 8 bits
      Put(254, 8);  // 2 + 254 = 256 of them
    } else {
      Put(0, 1);
    }
  }
  // An 8-bit symbol of Flat256Code: its code is the symbol, most significant bit first.
  void FlatSymbol(uint32_t symbol) {
    for (int i = 7; i >= 0; --i) Put((symbol >> i) & 1, 1);
  }
  std::string bytes() const { return bytes_; }

 private:
  std::string bytes_;
  size_t count_ = 0;
};

// A w x h lossless image stream whose entropy image gives its 4x4 tiles `groups` Huffman groups
// (tile i uses group i % groups), with this colour cache (0: none), every group five one-symbol
// codes (every pixel 0, no bits): what makes libwebp 1.2.4 allocate the tables of every group
// before it decodes a pixel. With vp8l_header the VP8L chunk's payload (its 5-byte header
// first); without, an ALPH chunk's stream.
inline std::string ManyGroupsLosslessStream(int w, int h, int cache_bits, int groups,
                                            bool vp8l_header) {
  LosslessBitWriter b;
  if (vp8l_header) {
    b.Put(0x2f, 8);
    b.Put(static_cast<uint32_t>(w - 1), 14);
    b.Put(static_cast<uint32_t>(h - 1), 14);
    b.Put(1, 1);
    b.Put(0, 3);
  }
  b.Put(0, 1);  // no transforms
  if (cache_bits > 0) {
    b.Put(1, 1);
    b.Put(static_cast<uint32_t>(cache_bits), 4);
  } else {
    b.Put(0, 1);
  }
  b.Put(1, 1);  // an entropy image of 4x4 tiles
  b.Put(0, 3);
  b.Put(0, 1);  // its own stream: no colour cache, green and red 8 bits, the rest one symbol
  b.Flat256Code(280);
  b.Flat256Code(256);
  for (int i = 0; i < 3; ++i) b.OneSymbolCode(0);
  const int tiles = ((w + 3) / 4) * ((h + 3) / 4);
  for (int i = 0; i < tiles; ++i) {
    const uint32_t g = static_cast<uint32_t>(i % groups);
    b.FlatSymbol(g & 255);  // green: the group's low byte
    b.FlatSymbol(g >> 8);   // red: its high byte
  }
  for (int i = 0; i < groups * 5; ++i) b.OneSymbolCode(0);
  b.Put(0, 64);
  return b.bytes();
}

// ManyGroupsLosslessStream as a lossless WebP (a VP8L chunk), or as a lossy image's alpha: a
// VP8X file with a lossy w x h image and an ALPH chunk holding the stream (alpha all 0).
inline std::string ManyGroupsWebp(int w, int h, int cache_bits, int groups, bool as_alpha) {
  std::string body = "WEBP";
  if (!as_alpha) {
    body += RiffChunk("VP8L", ManyGroupsLosslessStream(w, h, cache_bits, groups, true));
  } else {
    const std::vector<uint8_t> rgba = SmoothPixels(w, h, 7);
    const std::string lossy = EncodeWebp(rgba.data(), w, h, 3, WebpCodec::kLossy);
    body += RiffChunk("VP8X", Le(0x10, 1) + Le(0, 3) + Le(static_cast<uint32_t>(w - 1), 3) +
                                  Le(static_cast<uint32_t>(h - 1), 3));
    // ALPH header: lossless (1), no filter, no pre-processing.
    body += RiffChunk("ALPH", Le(1, 1) + ManyGroupsLosslessStream(w, h, cache_bits, groups, false));
    body += lossy.substr(12);  // the VP8 chunk
  }
  return "RIFF" + Le(static_cast<uint32_t>(body.size()), 4) + body;
}

}  // namespace sluice::testing

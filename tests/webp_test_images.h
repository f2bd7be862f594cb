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

}  // namespace sluice::testing

// PNGs of every colour type and bit depth for tests, written with libpng's writer directly (not
// through the decoder under test), and the RGB a decoder must make of them, computed from the
// samples by the rules of formats/png_codec.h (PIL's, checked against PIL itself in
// tests/python/test_pil_png.py). Also chunk surgery for damaged files.
#pragma once

#include <png.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "formats/png_codec.h"

namespace sluice::testing {

struct PngSpec {
  int width = 13;  // odd sizes: partial bytes at 1/2/4 bits, every Adam7 pass uneven
  int height = 11;
  PngColorType color_type = PngColorType::kRgb;
  int bit_depth = 8;
  bool interlaced = false;
  // The samples: width * height * SampleChannels(color_type), each below 2^bit_depth (palette
  // indices below palette.size() / 3).
  std::vector<uint16_t> samples;
  std::vector<uint8_t> palette;        // RGB triples, for kPalette
  std::vector<uint8_t> palette_alpha;  // tRNS for kPalette: the alpha of the first entries
  // tRNS for kGray (one value) or kRgb (three): the colour that is transparent.
  std::optional<std::vector<uint16_t>> transparent;
  size_t idat_chunk_bytes = 8192;  // the writer's compression buffer: a smaller one, more IDATs
};

inline int SampleChannels(PngColorType t) {
  switch (t) {
    case PngColorType::kGray:
      return 1;
    case PngColorType::kPalette:
      return 1;
    case PngColorType::kGrayAlpha:
      return 2;
    case PngColorType::kRgb:
      return 3;
    case PngColorType::kRgbAlpha:
      return 4;
  }
  return 0;
}

inline bool HasTrns(const PngSpec& s) {
  return !s.palette_alpha.empty() || s.transparent.has_value();
}

// Random samples for spec's type and depth (and a random palette of 2^depth entries, the first
// third of them given alpha when with_trns; a transparent colour that some pixels have).
inline void FillRandom(PngSpec* s, uint32_t seed, bool with_trns) {
  std::mt19937 rng(seed);
  const int channels = SampleChannels(s->color_type);
  const uint32_t levels = 1u << s->bit_depth;
  const size_t n = static_cast<size_t>(s->width) * s->height;
  s->samples.resize(n * channels);
  if (s->color_type == PngColorType::kPalette) {
    s->palette.resize(size_t{levels} * 3);
    for (auto& v : s->palette) v = static_cast<uint8_t>(rng());
    if (with_trns) {
      s->palette_alpha.resize(std::max<size_t>(1, levels / 3));
      for (auto& v : s->palette_alpha) v = static_cast<uint8_t>(rng());
      s->palette_alpha[0] = 0;
    }
  }
  for (auto& v : s->samples) v = static_cast<uint16_t>(rng() % levels);
  if (with_trns && (s->color_type == PngColorType::kGray || s->color_type == PngColorType::kRgb)) {
    std::vector<uint16_t> colour(s->samples.begin(), s->samples.begin() + channels);
    s->transparent = colour;
    for (size_t i = 0; i < n; i += 3) {  // every third pixel transparent
      for (int c = 0; c < channels; ++c) s->samples[i * channels + c] = colour[c];
    }
  }
}

// The file libpng writes for spec.
inline std::string WritePngWithLibpng(const PngSpec& s) {
  struct Sink {
    std::string bytes;
    static void Write(png_structp png, png_bytep data, size_t n) {
      static_cast<Sink*>(png_get_io_ptr(png))->bytes.append(reinterpret_cast<char*>(data), n);
    }
    static void Flush(png_structp) {}
  };
  Sink sink;
  const int channels = SampleChannels(s.color_type);
  const size_t row_bytes = (static_cast<size_t>(s.width) * channels * s.bit_depth + 7) / 8;
  std::vector<uint8_t> packed(row_bytes * s.height, 0);
  for (int y = 0; y < s.height; ++y) {
    uint8_t* row = &packed[y * row_bytes];
    for (int i = 0; i < s.width * channels; ++i) {
      const uint16_t v = s.samples[static_cast<size_t>(y) * s.width * channels + i];
      if (s.bit_depth == 16) {
        row[2 * i] = static_cast<uint8_t>(v >> 8);
        row[2 * i + 1] = static_cast<uint8_t>(v);
      } else if (s.bit_depth == 8) {
        row[i] = static_cast<uint8_t>(v);
      } else {
        const int bit = i * s.bit_depth;
        row[bit / 8] |= static_cast<uint8_t>(v << (8 - s.bit_depth - bit % 8));
      }
    }
  }
  std::vector<png_bytep> rows(s.height);
  for (int y = 0; y < s.height; ++y) rows[y] = &packed[y * row_bytes];
  std::vector<png_color> palette;
  for (size_t i = 0; i + 2 < s.palette.size(); i += 3) {
    palette.push_back(png_color{s.palette[i], s.palette[i + 1], s.palette[i + 2]});
  }
  png_color_16 trns_colour{};
  if (s.transparent) {
    const auto& t = *s.transparent;
    if (t.size() == 1) {
      trns_colour.gray = t[0];
    } else {
      trns_colour.red = t[0];
      trns_colour.green = t[1];
      trns_colour.blue = t[2];
    }
  }

  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) std::abort();  // the test's spec is wrong
  png_set_write_fn(png, &sink, Sink::Write, Sink::Flush);
  png_set_compression_buffer_size(png, s.idat_chunk_bytes);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, static_cast<int>(s.color_type),
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (!s.palette_alpha.empty()) {
    png_set_tRNS(png, info, s.palette_alpha.data(), static_cast<int>(s.palette_alpha.size()),
                 nullptr);
  } else if (s.transparent) {
    png_set_tRNS(png, info, nullptr, 0, &trns_colour);
  }
  png_write_info(png, info);
  if (s.interlaced) png_set_interlace_handling(png);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return sink.bytes;
}

// A sample at bit_depth as 8 bits: 1/2/4 bits scaled to 0..255, 16 bits' high byte.
inline uint8_t To8Bit(uint16_t v, int bit_depth) {
  if (bit_depth == 16) return static_cast<uint8_t>(v >> 8);
  return static_cast<uint8_t>(v * 255 / ((1u << bit_depth) - 1));
}

// The RGB a decoder must make of spec with alpha handled per alpha.
inline std::vector<uint8_t> ExpectedRgb(const PngSpec& s, Alpha alpha) {
  const int channels = SampleChannels(s.color_type);
  const size_t n = static_cast<size_t>(s.width) * s.height;
  std::vector<uint8_t> out(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* px = &s.samples[i * channels];
    uint32_t rgb[3];
    uint32_t a = 255;
    switch (s.color_type) {
      case PngColorType::kGray:
      case PngColorType::kGrayAlpha:
        rgb[0] = rgb[1] = rgb[2] = To8Bit(px[0], s.bit_depth);
        if (channels == 2) a = To8Bit(px[1], s.bit_depth);
        if (s.transparent && px[0] == (*s.transparent)[0]) a = 0;
        break;
      case PngColorType::kRgb:
      case PngColorType::kRgbAlpha:
        for (int c = 0; c < 3; ++c) rgb[c] = To8Bit(px[c], s.bit_depth);
        if (channels == 4) a = To8Bit(px[3], s.bit_depth);
        if (s.transparent && px[0] == (*s.transparent)[0] && px[1] == (*s.transparent)[1] &&
            px[2] == (*s.transparent)[2]) {
          a = 0;
        }
        break;
      case PngColorType::kPalette:
        for (int c = 0; c < 3; ++c) rgb[c] = s.palette[px[0] * 3 + c];
        if (px[0] < s.palette_alpha.size()) a = s.palette_alpha[px[0]];
        break;
    }
    const uint32_t bg = alpha == Alpha::kCompositeWhite ? 255 : 0;
    for (int c = 0; c < 3; ++c) {
      out[i * 3 + c] = alpha == Alpha::kDrop
                           ? static_cast<uint8_t>(rgb[c])
                           : static_cast<uint8_t>((rgb[c] * a + bg * (255 - a) + 127) / 255);
    }
  }
  return out;
}

// A PNG chunk: length, type, data and CRC.
inline std::string PngChunk(const std::string& type, const std::string& data) {
  std::string out;
  const uint32_t n = static_cast<uint32_t>(data.size());
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(n >> shift);
  std::string body = type + data;
  out += body;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(crc >> shift);
  return out;
}

struct ChunkSpan {
  std::string type;
  size_t offset = 0;  // of its length field
  size_t length = 0;  // of its data
  size_t end() const { return offset + 12 + length; }
};

// The chunks of a well-formed PNG, in order.
inline std::vector<ChunkSpan> PngChunks(const std::string& png) {
  std::vector<ChunkSpan> chunks;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const auto* p = reinterpret_cast<const uint8_t*>(png.data()) + at;
    ChunkSpan c;
    c.offset = at;
    c.length = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    c.type = png.substr(at + 4, 4);
    chunks.push_back(c);
    at = c.end();
  }
  return chunks;
}

// Rewrites the CRC of the chunk at `offset` to match its (edited) type and data.
inline void FixChunkCrc(std::string* png, size_t offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(png->data()) + offset;
  const uint32_t length =
      (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(png->data()) + offset + 4, length + 4));
  for (int i = 0; i < 4; ++i) {
    (*png)[offset + 8 + length + i] = static_cast<char>(crc >> (24 - 8 * i));
  }
}

}  // namespace sluice::testing

#include "formats/png_codec.h"

#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/png_test_images.h"

namespace sluice {
namespace {

using testing::ExpectedRgb;
using testing::FillRandom;
using testing::FixChunkCrc;
using testing::PngChunk;
using testing::PngChunks;
using testing::PngSpec;
using testing::WritePngWithLibpng;

struct Layout {
  PngColorType type;
  int depth;
  bool trns;  // a tRNS chunk (palette alphas, or a transparent gray or RGB colour)
};

// Every colour type at every bit depth PNG allows, with and without tRNS where it may have one.
const std::vector<Layout> kLayouts = {
    {PngColorType::kGray, 1, false},       {PngColorType::kGray, 2, false},
    {PngColorType::kGray, 4, false},       {PngColorType::kGray, 8, false},
    {PngColorType::kGray, 16, false},      {PngColorType::kGray, 1, true},
    {PngColorType::kGray, 4, true},        {PngColorType::kGray, 8, true},
    {PngColorType::kGray, 16, true},       {PngColorType::kGrayAlpha, 8, false},
    {PngColorType::kGrayAlpha, 16, false}, {PngColorType::kRgb, 8, false},
    {PngColorType::kRgb, 16, false},       {PngColorType::kRgb, 8, true},
    {PngColorType::kRgb, 16, true},        {PngColorType::kRgbAlpha, 8, false},
    {PngColorType::kRgbAlpha, 16, false},  {PngColorType::kPalette, 1, false},
    {PngColorType::kPalette, 2, false},    {PngColorType::kPalette, 4, false},
    {PngColorType::kPalette, 8, false},    {PngColorType::kPalette, 1, true},
    {PngColorType::kPalette, 2, true},     {PngColorType::kPalette, 4, true},
    {PngColorType::kPalette, 8, true},
};

const char* AlphaName(Alpha a) {
  switch (a) {
    case Alpha::kDrop:
      return "drop";
    case Alpha::kCompositeWhite:
      return "white";
    case Alpha::kCompositeBlack:
      return "black";
  }
  return "?";
}

PngSpec Spec(const Layout& l, bool interlaced, uint32_t seed) {
  PngSpec s;
  s.color_type = l.type;
  s.bit_depth = l.depth;
  s.interlaced = interlaced;
  FillRandom(&s, seed, l.trns);
  return s;
}

// A noisy 8-bit RGB image in many small IDAT chunks, so cuts land in chunk headers, data and CRCs.
PngSpec NoisyRgbSpec() {
  PngSpec s;
  s.width = 24;
  s.height = 9;
  s.idat_chunk_bytes = 64;
  FillRandom(&s, 7, false);
  return s;
}

Status DecodeStatus(const std::string& png, Image* out = nullptr) {
  Image scratch;
  PngDecoder decoder;
  return decoder.Decode(png, Alpha::kDrop, out != nullptr ? out : &scratch);
}

TEST_CASE("EveryColourTypeAndBitDepthDecodesToTheSamplesRgbUnderEveryAlphaPolicy") {
  PngDecoder decoder;  // one for every case: its row buffer is reused across sizes and layouts
  uint32_t seed = 1;
  for (const Layout& l : kLayouts) {
    for (bool interlaced : {false, true}) {
      const PngSpec s = Spec(l, interlaced, seed++);
      const std::string png = WritePngWithLibpng(s);
      for (Alpha alpha : {Alpha::kDrop, Alpha::kCompositeWhite, Alpha::kCompositeBlack}) {
        INFO(PngColorTypeName(l.type)
             << " " << l.depth << "-bit" << (l.trns ? " tRNS" : "") << (interlaced ? " Adam7" : "")
             << " alpha " << AlphaName(alpha));
        Image out;
        REQUIRE(decoder.Decode(png, alpha, &out).ok());
        CHECK(out.width == s.width);
        CHECK(out.height == s.height);
        CHECK(out.pixels == ExpectedRgb(s, alpha));
      }
    }
  }
}

TEST_CASE("CompositingAPngWithoutAlphaChangesNoPixel") {
  const PngSpec s = Spec({PngColorType::kRgb, 8, false}, false, 3);
  const std::string png = WritePngWithLibpng(s);
  PngDecoder decoder;
  Image drop, white;
  REQUIRE(decoder.Decode(png, Alpha::kDrop, &drop).ok());
  REQUIRE(decoder.Decode(png, Alpha::kCompositeWhite, &white).ok());
  CHECK(white.pixels == drop.pixels);
}

TEST_CASE("SixteenBitSamplesKeepTheirHighByte") {
  PngSpec s;
  s.width = 6;
  s.height = 1;
  s.color_type = PngColorType::kGray;
  s.bit_depth = 16;
  s.samples = {0, 255, 256, 0x7FFF, 0x8080, 0xFFFF};
  Image out;
  REQUIRE(DecodeStatus(WritePngWithLibpng(s), &out).ok());
  const std::vector<uint8_t> high = {0, 0, 1, 0x7F, 0x80, 0xFF};
  for (size_t i = 0; i < high.size(); ++i) {
    INFO("sample " << s.samples[i]);
    CHECK(out.pixels[i * 3] == high[i]);
    CHECK(out.pixels[i * 3 + 2] == high[i]);
  }
}

TEST_CASE("ReadPngHeaderGivesSizeDepthTypeAndInterlace") {
  PngSpec s = Spec({PngColorType::kPalette, 4, true}, true, 9);
  s.width = 300;
  s.height = 2;
  FillRandom(&s, 9, true);
  Result<PngHeader> h = ReadPngHeader(WritePngWithLibpng(s));
  REQUIRE(h.ok());
  CHECK(h->width == 300);
  CHECK(h->height == 2);
  CHECK(h->bit_depth == 4);
  CHECK(h->color_type == PngColorType::kPalette);
  CHECK(h->interlaced);
}

TEST_CASE("MalformedIhdrIsInvalidArgumentNamingTheByte") {
  const std::string good = WritePngWithLibpng(Spec({PngColorType::kRgb, 8, false}, false, 4));
  struct Case {
    const char* what;
    size_t at;
    char value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"bit depth 3", 24, 3, "bit depth 3 is not allowed for colour type RGB (byte 24)"},
      {"colour type 5", 25, 5, "colour type 5 is unknown (byte 25)"},
      {"interlace 2", 28, 2, "interlace method 2 is unknown (byte 28)"},
      {"filter 1", 27, 1, "compression or filter method is not 0 (byte 26)"},
      {"width 0", 16, 0, "is not 1..2^31-1 each (byte 16)"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::string png = good;
    if (c.at == 16) png.replace(16, 4, std::string(4, '\0'));
    png[c.at] = c.value;
    FixChunkCrc(&png, 8);
    Status s = DecodeStatus(png);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains(c.message));
  }
  std::string bad_crc = good;
  bad_crc[20] ^= 1;
  CHECK_THAT(DecodeStatus(bad_crc).message(), Catch::Contains("IHDR CRC mismatch (byte 29)"));
  CHECK_THAT(DecodeStatus("\x89PNG\r\n\x1A").message(), Catch::Contains("not a PNG"));
  CHECK_THAT(DecodeStatus("\xFF\xD8\xFF\xE0").message(), Catch::Contains("not a PNG"));
}

// The IDAT data of png's whole chunks, and of the chunk cut at its end, in order.
std::string IdatData(const std::string& png) {
  std::string data;
  size_t at = 8;
  while (at + 8 <= png.size()) {
    const auto* p = reinterpret_cast<const uint8_t*>(png.data()) + at;
    const size_t length = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
    if (png.compare(at + 4, 4, "IDAT") == 0) data += png.substr(at + 8, length);
    at += length + 12;
  }
  return data;
}

// How many bytes zlib inflates from a prefix of a zlib stream (the filtered rows it holds).
size_t InflatedBytes(const std::string& z) {
  z_stream zs{};
  REQUIRE(inflateInit(&zs) == Z_OK);
  std::vector<uint8_t> out(1 << 16);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(z.data()));
  zs.avail_in = static_cast<uInt>(z.size());
  int ret = Z_OK;
  while (ret == Z_OK) {
    zs.next_out = out.data();
    zs.avail_out = static_cast<uInt>(out.size());
    ret = inflate(&zs, Z_NO_FLUSH);
    if (ret == Z_BUF_ERROR && zs.avail_out > 0) break;  // input used up
    if (ret == Z_BUF_ERROR) ret = Z_OK;
  }
  const size_t n = zs.total_out;
  inflateEnd(&zs);
  return n;
}

// Noisy images in many small IDAT chunks, so cuts land in chunk headers, data and CRCs: RGB,
// RGBA composited row by row, and RGBA assembled by Adam7.
struct CutCase {
  const char* name;
  PngSpec spec;
  Alpha alpha;
};
std::vector<CutCase> CutCases() {
  PngSpec rgba = NoisyRgbSpec();
  rgba.color_type = PngColorType::kRgbAlpha;
  FillRandom(&rgba, 8, false);
  PngSpec adam7 = rgba;
  adam7.interlaced = true;
  return {{"RGB", NoisyRgbSpec(), Alpha::kDrop},
          {"RGBA composited", rgba, Alpha::kCompositeWhite},
          {"Adam7 RGBA composited", adam7, Alpha::kCompositeBlack}};
}

TEST_CASE("CutPngIsWholeOnceEveryRowIsInItAndDataLossBeforeAtEveryCutPoint") {
  for (const CutCase& c : CutCases()) {
    const std::string png = WritePngWithLibpng(c.spec);
    const std::vector<testing::ChunkSpan> chunks = PngChunks(png);
    REQUIRE(chunks.back().type == "IEND");
    REQUIRE(chunks.size() > 5);
    const size_t rows_bytes = InflatedBytes(IdatData(png));
    const std::vector<uint8_t> expected = ExpectedRgb(c.spec, c.alpha);
    PngDecoder decoder;
    Image out;
    int whole = 0;
    for (size_t cut = 0; cut < png.size(); ++cut) {
      const std::string head = png.substr(0, cut);
      // Every row is in the data when the IDAT bytes it holds inflate to all of them, though the
      // zlib stream's end, its checksum, the last IDAT's CRC or IEND are missing.
      const bool every_row = cut >= 33 && InflatedBytes(IdatData(head)) == rows_bytes;
      INFO(c.name << ": cut at " << cut << " of " << png.size()
                  << (every_row ? ", rows all in" : ""));
      Status st = decoder.Decode(head, c.alpha, &out);
      if (cut < 33) {
        CHECK(st.code() == StatusCode::kInvalidArgument);
      } else if (!every_row) {
        CHECK(st.code() == StatusCode::kDataLoss);
        CHECK_THAT(st.message(), Catch::Contains("ends at byte " + std::to_string(cut)));
      } else {
        REQUIRE(st.ok());
        CHECK(out.pixels == expected);
        ++whole;
      }
    }
    // The cuts after the last row's data: inside the checksum's IDAT, its CRC, and IEND.
    CHECK(whole > 12 + 4);
  }
}

// A file whose zlib stream holds every row but stops before its end and checksum, then IEND.
std::string WithoutZlibEnd(const std::string& png, size_t drop_more = 0) {
  const std::string z = IdatData(png);
  const size_t rows = InflatedBytes(z);
  size_t n = 1;
  while (InflatedBytes(z.substr(0, n)) < rows) ++n;
  const std::vector<testing::ChunkSpan> chunks = PngChunks(png);
  size_t first_idat = 0;
  while (chunks[first_idat].type != "IDAT") ++first_idat;
  return png.substr(0, chunks[first_idat].offset) + PngChunk("IDAT", z.substr(0, n - drop_more)) +
         PngChunk("IEND", "");
}

TEST_CASE("IendWhereTheZlibEndShouldBeIsWholeOnceEveryRowIsThere") {
  for (const CutCase& c : CutCases()) {
    INFO(c.name);
    const std::string png = WritePngWithLibpng(c.spec);
    Image out;
    PngDecoder decoder;
    REQUIRE(decoder.Decode(WithoutZlibEnd(png), c.alpha, &out).ok());
    CHECK(out.pixels == ExpectedRgb(c.spec, c.alpha));

    // A row short: libpng's "Not enough image data" is then damage.
    Status st = decoder.Decode(WithoutZlibEnd(png, 1), c.alpha, &out);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("Not enough image data"));

    // The last IDAT's CRC there but wrong: damage, though every row decoded.
    std::string bad_crc = WithoutZlibEnd(png);
    bad_crc[bad_crc.size() - 12 - 1] ^= 0x01;
    st = decoder.Decode(bad_crc, c.alpha, &out);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("CRC error"));
  }
}

TEST_CASE("CorruptImageDataIsInvalidArgumentWithLibpngsMessage") {
  const std::string good = WritePngWithLibpng(NoisyRgbSpec());
  const std::vector<testing::ChunkSpan> chunks = PngChunks(good);
  const testing::ChunkSpan* idat = nullptr;
  for (const auto& c : chunks) {
    if (c.type == "IDAT" && idat == nullptr) idat = &c;
  }
  REQUIRE(idat != nullptr);

  SECTION("a damaged IDAT fails its CRC") {
    std::string png = good;
    png[idat->offset + 8 + 10] ^= 0x55;
    Status s = DecodeStatus(png);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("invalid PNG: IDAT: CRC error"));
  }
  SECTION("a damaged zlib stream with a matching CRC fails in inflate") {
    std::string png = good;
    png[idat->offset + 8] ^= 0x0F;  // the zlib header's compression method and window
    FixChunkCrc(&png, idat->offset);
    Status s = DecodeStatus(png);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::StartsWith("invalid PNG: "));
  }
  SECTION("an unknown critical chunk") {
    std::string png = good;
    png.insert(33, PngChunk("QQQQ", "x"));
    Status s = DecodeStatus(png);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("QQQQ"));
  }
}

TEST_CASE("ImageDataForFewerRowsThanIhdrSaysIsInvalidArgument") {
  PngSpec s = NoisyRgbSpec();
  std::string png = WritePngWithLibpng(s);
  png[23] = static_cast<char>(s.height + 5);  // IHDR's height, low byte
  FixChunkCrc(&png, 8);
  Status st = DecodeStatus(png);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("invalid PNG: "));
}

TEST_CASE("AncillaryChunkWithBadCrcIsAWarningNotAnError") {
  const PngSpec s = Spec({PngColorType::kRgb, 8, false}, false, 5);
  std::string png = WritePngWithLibpng(s);
  std::string text = PngChunk("tEXt", std::string("Comment\0hello", 13));
  text.back() ^= 1;
  png.insert(33, text);
  png.insert(33, PngChunk("iCCP", std::string("p\0\0garbage that is not zlib", 27)));
  Image out;
  REQUIRE(DecodeStatus(png, &out).ok());
  CHECK(out.pixels == ExpectedRgb(s, Alpha::kDrop));
}

TEST_CASE("ImageOverMaxPixelsIsRefusedNamingItsSizeBeforeAnyAllocation") {
  const PngSpec s = Spec({PngColorType::kRgb, 8, false}, false, 6);
  const std::string png = WritePngWithLibpng(s);
  PngDecoder decoder;
  Image out;
  bool gate_asked = false;
  const DecodeMemoryGate gate = [&](int64_t) {
    gate_asked = true;
    return Status::OK();
  };
  Status st = decoder.Decode(png, Alpha::kDrop, &out, 13 * 11 - 1, &gate);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("PNG of 13x11 = 143 pixels exceeds max_pixels 142"));
  CHECK_FALSE(gate_asked);
  CHECK(out.pixels.capacity() == 0);
  REQUIRE(decoder.Decode(png, Alpha::kDrop, &out, 13 * 11, &gate).ok());

  // A header claiming 2^31-1 squared pixels over a few bytes of data.
  std::string huge = png;
  huge.replace(16, 8, "\x7F\xFF\xFF\xFF\x7F\xFF\xFF\xFF");
  FixChunkCrc(&huge, 8);
  Image none;
  st = decoder.Decode(huge, Alpha::kDrop, &none);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("exceeds max_pixels"));
  CHECK(none.pixels.capacity() == 0);
}

TEST_CASE("MemoryGateIsAskedOnceForTheEstimateAndItsRefusalAllocatesNothing") {
  for (bool interlaced : {false, true}) {
    for (Alpha alpha : {Alpha::kDrop, Alpha::kCompositeWhite}) {
      INFO((interlaced ? "Adam7" : "plain") << " alpha " << AlphaName(alpha));
      PngSpec s = Spec({PngColorType::kRgbAlpha, 16, false}, interlaced, 8);
      const std::string png = WritePngWithLibpng(s);
      Result<PngHeader> header = ReadPngHeader(png);
      REQUIRE(header.ok());
      const int64_t estimate = EstimatePngDecodeBytes(*header, alpha);
      // At least the pixels it holds: RGB, or RGBA while Adam7 assembles an image to composite.
      const int64_t held =
          int64_t{s.width} * s.height * (interlaced && alpha != Alpha::kDrop ? 4 : 3);
      CHECK(estimate >= held);

      std::vector<int64_t> asked;
      const DecodeMemoryGate refuse = [&](int64_t bytes) {
        asked.push_back(bytes);
        return ResourceExhausted("decode budget of 100 bytes is too small");
      };
      PngDecoder decoder;
      Image out;
      Status st = decoder.Decode(png, alpha, &out, kDefaultMaxPixels, &refuse);
      CHECK(st.code() == StatusCode::kResourceExhausted);
      CHECK(st.message() == "decode budget of 100 bytes is too small");
      CHECK(asked == std::vector<int64_t>{estimate});
      CHECK(out.pixels.capacity() == 0);

      asked.clear();
      const DecodeMemoryGate allow = [&](int64_t bytes) {
        asked.push_back(bytes);
        return Status::OK();
      };
      REQUIRE(decoder.Decode(png, alpha, &out, kDefaultMaxPixels, &allow).ok());
      CHECK(asked.size() == 1);
      CHECK(static_cast<int64_t>(out.pixels.capacity()) <= held);
      CHECK(out.pixels == ExpectedRgb(s, alpha));
    }
  }
}

// libpng looks up an index past the PLTE as black, PIL as gray (i, i, i): neither is the image.
TEST_CASE("PaletteIndexBeyondThePlteIsInvalidArgumentNamingIndexAndLength") {
  for (int depth : {2, 4, 8}) {
    for (bool interlaced : {false, true}) {
      for (Alpha alpha : {Alpha::kDrop, Alpha::kCompositeWhite}) {
        INFO(depth << "-bit" << (interlaced ? " Adam7" : "") << " alpha " << AlphaName(alpha));
        PngSpec s = Spec({PngColorType::kPalette, depth, alpha != Alpha::kDrop}, interlaced, 40);
        const int entries = 3;
        uint16_t max_index = 0;
        for (uint16_t v : s.samples) max_index = std::max(max_index, v);
        REQUIRE(max_index >= entries);
        std::string png = WritePngWithLibpng(s);  // with the whole palette: libpng writes no other
        for (const auto& c : PngChunks(png)) {
          if (c.type != "PLTE") continue;
          png.replace(c.offset, c.end() - c.offset,
                      PngChunk("PLTE", png.substr(c.offset + 8, entries * 3)));
          break;
        }
        if (!s.palette_alpha.empty()) {  // tRNS no longer than the PLTE, or libpng drops it
          for (const auto& c : PngChunks(png)) {
            if (c.type != "tRNS" || c.length <= static_cast<size_t>(entries)) continue;
            png.replace(c.offset, c.end() - c.offset,
                        PngChunk("tRNS", png.substr(c.offset + 8, entries)));
            break;
          }
        }
        PngDecoder decoder;
        Image out;
        Status st = decoder.Decode(png, alpha, &out);
        CHECK(st.code() == StatusCode::kInvalidArgument);
        CHECK(st.message() == "invalid PNG: palette index " + std::to_string(max_index) +
                                  " beyond the PLTE's 3 entries");

        // Every index inside the shorter PLTE: the image is fine.
        for (auto& v : s.samples) v %= entries;
        png = WritePngWithLibpng(s);
        REQUIRE(decoder.Decode(png, alpha, &out).ok());
        CHECK(out.pixels == ExpectedRgb(s, alpha));
      }
    }
  }
}

// libpng drops a tRNS longer than the PLTE; PIL applies its first entries, and so does Sluice.
TEST_CASE("TrnsLongerThanThePlteGivesItsFirstEntriesTheirAlpha") {
  for (bool interlaced : {false, true}) {
    INFO((interlaced ? "Adam7" : "plain"));
    PngSpec s = Spec({PngColorType::kPalette, 4, true}, interlaced, 60);
    REQUIRE(s.palette_alpha.size() == 5);
    for (auto& v : s.samples) v %= 3;
    std::string png = WritePngWithLibpng(s);
    for (const auto& c : PngChunks(png)) {
      if (c.type != "PLTE") continue;
      png.replace(c.offset, c.end() - c.offset, PngChunk("PLTE", png.substr(c.offset + 8, 9)));
      break;
    }
    PngSpec three = s;  // what the file now says: three entries, each with its alpha
    three.palette.resize(9);
    three.palette_alpha.resize(3);
    PngDecoder decoder;
    Image out;
    for (Alpha alpha : {Alpha::kDrop, Alpha::kCompositeWhite, Alpha::kCompositeBlack}) {
      REQUIRE(decoder.Decode(png, alpha, &out).ok());
      CHECK(out.pixels == ExpectedRgb(three, alpha));
    }

    // A tRNS whose CRC does not match is dropped, as any damaged ancillary chunk: all opaque.
    for (const auto& c : PngChunks(png)) {
      if (c.type == "tRNS") png[c.end() - 1] ^= 1;
    }
    three.palette_alpha.clear();
    REQUIRE(decoder.Decode(png, Alpha::kCompositeWhite, &out).ok());
    CHECK(out.pixels == ExpectedRgb(three, Alpha::kCompositeWhite));
  }
}

TEST_CASE("WideCompositedRowIsNotKeptAfterItsDecode") {
  PngSpec wide;
  wide.width = 1'000'000;
  wide.height = 1;
  wide.color_type = PngColorType::kRgbAlpha;
  FillRandom(&wide, 9, false);
  const std::string png = WritePngWithLibpng(wide);
  PngDecoder decoder;
  Image out;
  REQUIRE(decoder.Decode(png, Alpha::kCompositeWhite, &out).ok());
  CHECK(out.pixels == ExpectedRgb(wide, Alpha::kCompositeWhite));
  CHECK(decoder.kept_bytes() <= PngDecoder::kKeptRowBytes);

  // A damaged one frees it too.
  REQUIRE_FALSE(decoder.Decode(png.substr(0, png.size() / 2), Alpha::kCompositeWhite, &out).ok());
  CHECK(decoder.kept_bytes() <= PngDecoder::kKeptRowBytes);

  // An ordinary row is kept for the next image.
  const PngSpec small = Spec({PngColorType::kRgbAlpha, 8, false}, false, 10);
  REQUIRE(decoder.Decode(WritePngWithLibpng(small), Alpha::kCompositeWhite, &out).ok());
  CHECK(decoder.kept_bytes() >= static_cast<size_t>(small.width) * 4);
}

TEST_CASE("GrowingAKeptImageAllocatesOnlyTheNewSize") {
  PngSpec s;
  s.width = 1000;
  s.height = 1000;
  FillRandom(&s, 11, false);
  PngDecoder decoder;
  Image out;
  REQUIRE(decoder.Decode(WritePngWithLibpng(s), Alpha::kDrop, &out).ok());
  s.height = 1001;
  FillRandom(&s, 12, false);
  REQUIRE(decoder.Decode(WritePngWithLibpng(s), Alpha::kDrop, &out).ok());
  CHECK(out.pixels.capacity() == size_t{1000} * 1001 * 3);  // not twice the old size
}

// libpng's and zlib's every allocation is counted: at its peak it holds no more than the
// estimate gives it beside the pixels and our row.
TEST_CASE("LibpngAndZlibStayWithinTheEstimate") {
  const std::vector<Layout> layouts = {{PngColorType::kPalette, 8, true},
                                       {PngColorType::kPalette, 1, false},
                                       {PngColorType::kRgbAlpha, 16, false},
                                       {PngColorType::kGray, 16, true},
                                       {PngColorType::kRgb, 8, false}};
  PngDecoder decoder;
  for (const Layout& l : layouts) {
    for (int width : {1, 13, 3000}) {
      for (bool interlaced : {false, true}) {
        for (Alpha alpha : {Alpha::kDrop, Alpha::kCompositeWhite}) {
          PngSpec s = Spec(l, interlaced, 50);
          s.width = width;
          s.height = 9;
          FillRandom(&s, 51, l.trns);
          const std::string png = WritePngWithLibpng(s);
          Result<PngHeader> header = ReadPngHeader(png);
          REQUIRE(header.ok());
          const int64_t pixels =
              int64_t{width} * s.height * (interlaced && alpha != Alpha::kDrop ? 4 : 3);
          const int64_t ours = alpha != Alpha::kDrop ? int64_t{width} * 4 : 0;
          Image out;
          REQUIRE(decoder.Decode(png, alpha, &out).ok());
          INFO(PngColorTypeName(l.type)
               << " " << l.depth << "-bit width " << width << (interlaced ? " Adam7" : "")
               << " alpha " << AlphaName(alpha) << ": libpng peak "
               << decoder.last_libpng_peak_bytes());
          // A noisy image this wide (8 bits or more) has zlib use its whole 32 KiB window: zlib's
          // share is counted.
          if (width == 3000 && l.depth >= 8) CHECK(decoder.last_libpng_peak_bytes() > 32 * 1024);
          CHECK(decoder.last_libpng_peak_bytes() <=
                EstimatePngDecodeBytes(*header, alpha) - pixels - ours);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice

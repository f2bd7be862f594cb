#include "formats/webp_lossless_header.h"

#include <webp/decode.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/webp_test_images.h"

namespace sluice {
namespace {

using testing::ManyGroupsLosslessStream;

// A VP8L file's chunk payload: what follows "VP8L" and its size in a simple-format file.
std::string Vp8lPayload(const std::string& webp) {
  REQUIRE(webp.substr(12, 4) == "VP8L");
  return webp.substr(20);
}

// libwebp 1.2.4's kTableSize: 2300 entries for red, blue, alpha and distance, then green's.
constexpr int64_t kTableEntries0 = 2300 + 654;
constexpr int64_t kTableEntries11 = 2300 + 2704;

TEST_CASE("EveryGroupTheEntropyImageNamesIsCounted") {
  struct Case {
    int size, cache_bits, groups;
    bool remapped;  // libwebp remaps over 1000 groups, allocating a map entry for each index
  };
  for (const Case& c : {Case{64, 11, 256, false}, Case{64, 0, 256, false}, Case{128, 4, 1001, true},
                        Case{256, 11, 4096, true}}) {
    for (bool vp8l : {true, false}) {
      const std::string stream =
          ManyGroupsLosslessStream(c.size, c.size, c.cache_bits, c.groups, vp8l);
      Result<LosslessCodes> codes = ReadLosslessCodes(
          stream, c.size, c.size, vp8l ? LosslessStream::kVp8l : LosslessStream::kAlph);
      INFO(c.groups << " groups, cache " << c.cache_bits << (vp8l ? ", VP8L" : ", ALPH"));
      REQUIRE(codes.ok());
      CHECK(codes->color_cache_bits == c.cache_bits);
      CHECK(codes->groups == c.groups);
      CHECK(codes->max_group == c.groups - 1);
      CHECK(codes->huffman_bytes ==
            LosslessHuffmanBytes(c.cache_bits, c.groups, c.groups - 1, c.remapped));
    }
  }
  // The crafted file of the review: 65,536 groups at 20,016 bytes of tables each (1.3 GB).
  Result<LosslessCodes> worst = ReadLosslessCodes(
      ManyGroupsLosslessStream(1024, 1024, 11, 65536, true), 1024, 1024, LosslessStream::kVp8l);
  REQUIRE(worst.ok());
  CHECK(worst->groups == 65536);
  CHECK(worst->huffman_bytes == 65536 * (kTableEntries11 * 4 + 568) + 65536 * 4);
}

// libwebp remaps only past 1000 groups (or past the pixels): below, it allocates every index up
// to the highest, used or not.
TEST_CASE("GroupsUpToTheHighestAreCountedUnlessRemapped") {
  CHECK(LosslessHuffmanBytes(0, 1000, 999, false) == 1000 * (kTableEntries0 * 4 + 568));
  CHECK(LosslessHuffmanBytes(11, 1, 0, false) == kTableEntries11 * 4 + 568);
  CHECK(LosslessHuffmanBytes(0, 2, 60000, true) == 2 * (kTableEntries0 * 4 + 568) + 60001 * 4);
}

// What libwebp's encoder writes: transforms (predictor, cross-colour, subtract green, colour
// indexing), colour caches, entropy images of many groups on blocky content.
TEST_CASE("EncoderMadeStreamsReadToTheirCodes") {
  struct Content {
    int w, h;
    std::vector<uint8_t> rgba;
  };
  std::vector<uint8_t> few_colours = testing::SmoothPixels(50, 30, 3);
  for (size_t i = 0; i < few_colours.size(); ++i) few_colours[i] &= 0xC0;  // a palette
  for (const Content& c :
       {Content{640, 480, testing::SmoothPixels(640, 480, 1)},
        Content{1000, 750, testing::BlockyPixels(1000, 750, 2)}, Content{50, 30, few_colours},
        Content{1, 1, {1, 2, 3, 4}}, Content{17, 3, testing::SmoothPixels(17, 3, 4)}}) {
    for (int channels : {3, 4}) {
      const std::string webp =
          testing::EncodeWebp(c.rgba.data(), c.w, c.h, channels, testing::WebpCodec::kLossless);
      Result<LosslessCodes> codes =
          ReadLosslessCodes(Vp8lPayload(webp), c.w, c.h, LosslessStream::kVp8l);
      INFO(c.w << "x" << c.h << ", " << channels << " channels: " << codes.status().ToString());
      REQUIRE(codes.ok());
      CHECK(codes->groups >= 1);
      CHECK(codes->huffman_bytes < int64_t{c.w} * c.h * 4 + (1 << 20));
      if (c.w == 1000) CHECK(codes->groups > 100);  // each tile's statistics differ
    }
  }
}

TEST_CASE("CutStreamIsDataLossAtEveryCutPointBeforeTheGroupsAreKnown") {
  const std::vector<uint8_t> rgba = testing::BlockyPixels(200, 150, 5);
  const std::string encoded =
      Vp8lPayload(testing::EncodeWebp(rgba.data(), 200, 150, 4, testing::WebpCodec::kLossless));
  const std::string crafted = ManyGroupsLosslessStream(64, 64, 11, 256, true);
  for (const std::string& stream : {encoded, crafted}) {
    const int w = stream == crafted ? 64 : 200;
    const int h = stream == crafted ? 64 : 150;
    int cut_short = 0;
    for (size_t cut = 0; cut < stream.size(); ++cut) {
      Result<LosslessCodes> codes =
          ReadLosslessCodes(stream.substr(0, cut), w, h, LosslessStream::kVp8l);
      INFO("cut at " << cut << ": " << codes.status().ToString());
      if (codes.ok()) continue;  // past the entropy image: the groups are known
      REQUIRE(codes.status().code() == StatusCode::kDataLoss);
      CHECK(codes.status().message().find("lossless bitstream ends at byte ") == 0);
      ++cut_short;
    }
    CHECK(cut_short > 5);
  }
}

TEST_CASE("DamagedStreamIsAnErrorOrACountNeverACrash") {
  const std::vector<uint8_t> rgba = testing::SmoothPixels(60, 40, 6);
  for (const std::string& stream :
       {Vp8lPayload(testing::EncodeWebp(rgba.data(), 60, 40, 4, testing::WebpCodec::kLossless)),
        ManyGroupsLosslessStream(60, 40, 11, 150, true)}) {
    int refused = 0;
    for (size_t at = 0; at < stream.size(); ++at) {
      for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x5A}, uint8_t{0xFF}}) {
        std::string damaged = stream;
        damaged[at] = static_cast<char>(damaged[at] ^ flip);
        Result<LosslessCodes> codes = ReadLosslessCodes(damaged, 60, 40, LosslessStream::kVp8l);
        if (codes.ok()) {
          CHECK(codes->groups >= 1);
          CHECK(codes->groups <= 65536);
          continue;
        }
        ++refused;
        CHECK((codes.status().code() == StatusCode::kInvalidArgument ||
               codes.status().code() == StatusCode::kDataLoss));
      }
    }
    CHECK(refused > 0);
  }
}

// Against libwebp itself: of randomly damaged streams (bits flipped, bytes replaced, cut), none
// that libwebp decodes is refused here. (A refused one libwebp decodes would be a file lost.)
TEST_CASE("NoStreamLibwebpDecodesIsRefused") {
  const std::vector<uint8_t> blocky = testing::BlockyPixels(120, 90, 3);
  std::vector<uint8_t> few_colours = testing::SmoothPixels(50, 30, 3);
  for (uint8_t& v : few_colours) v &= 0xC0;
  const std::vector<std::string> streams = {
      Vp8lPayload(testing::EncodeWebp(blocky.data(), 120, 90, 4, testing::WebpCodec::kLossless)),
      Vp8lPayload(testing::EncodeWebp(blocky.data(), 120, 90, 3, testing::WebpCodec::kLossless)),
      Vp8lPayload(
          testing::EncodeWebp(few_colours.data(), 50, 30, 4, testing::WebpCodec::kLossless)),
      ManyGroupsLosslessStream(40, 30, 11, 50, true)};
  std::mt19937 rng(17);
  int decoded = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s = streams[i % streams.size()];
    for (uint32_t m = 1 + rng() % 4; m > 0; --m) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          s[at] = static_cast<char>(rng());
          break;
        default:
          s.resize(std::max<size_t>(1, at));
      }
    }
    const std::string file = "RIFF" +
                             testing::Le(static_cast<uint32_t>(12 + s.size() + s.size() % 2), 4) +
                             "WEBP" + testing::RiffChunk("VP8L", s);
    const auto* bytes = reinterpret_cast<const uint8_t*>(file.data());
    int w = 0, h = 0;
    if (!WebPGetInfo(bytes, file.size(), &w, &h)) continue;
    uint8_t* rgba = WebPDecodeRGBA(bytes, file.size(), &w, &h);
    if (rgba == nullptr) continue;
    WebPFree(rgba);
    ++decoded;
    Result<LosslessCodes> codes = ReadLosslessCodes(s, w, h, LosslessStream::kVp8l);
    INFO("damaged stream " << i << ": " << codes.status().ToString());
    CHECK(codes.ok());
  }
  CHECK(decoded > 100);
}

TEST_CASE("MalformedHeaderIsInvalidArgumentNamingTheField") {
  std::string stream = ManyGroupsLosslessStream(64, 64, 11, 256, true);
  Result<LosslessCodes> other_size = ReadLosslessCodes(stream, 64, 65, LosslessStream::kVp8l);
  CHECK(other_size.status().code() == StatusCode::kInvalidArgument);
  CHECK(other_size.status().message() ==
        "invalid lossless bitstream near byte 5: size 64x64 is not the header's 64x65");
  stream[0] = 0x2e;
  CHECK(ReadLosslessCodes(stream, 64, 64, LosslessStream::kVp8l).status().message() ==
        "invalid lossless bitstream near byte 1: signature is not 0x2F");
  // A colour cache of 12 bits: the stream's bits after the 5-byte header are 0 (no transform),
  // 1 (a cache), then its 4-bit size.
  testing::LosslessBitWriter b;
  b.Put(0, 1);
  b.Put(1, 1);
  b.Put(12, 4);
  b.Put(0, 32);
  Result<LosslessCodes> cache = ReadLosslessCodes(b.bytes(), 8, 8, LosslessStream::kAlph);
  CHECK(cache.status().code() == StatusCode::kInvalidArgument);
  CHECK(cache.status().message() ==
        "invalid lossless bitstream near byte 0: colour cache of 12 bits");
}

}  // namespace
}  // namespace sluice

#include "formats/webp_codec.h"

#include <malloc.h>
#include <webp/encode.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/webp_test_images.h"

// Every allocation in this test process goes through these (glibc's allocator underneath), so a
// test can see the most bytes libwebp holds at once during a decode. Only counted between
// StartCounting and StopCounting; the tests that count run on one thread.
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void __libc_free(void*);

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_bytes{0};
std::atomic<int64_t> g_peak{0};

void Counted(void* p, int sign) {
  if (p == nullptr || !g_counting.load(std::memory_order_relaxed)) return;
  const int64_t now = g_bytes.fetch_add(sign * static_cast<int64_t>(malloc_usable_size(p))) +
                      sign * static_cast<int64_t>(malloc_usable_size(p));
  if (now > g_peak.load()) g_peak.store(now);
}

void StartCounting() {
  g_bytes = 0;
  g_peak = 0;
  g_counting = true;
}

int64_t StopCounting() {
  g_counting = false;
  return g_peak.load();
}

}  // namespace

extern "C" void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  Counted(p, 1);
  return p;
}
extern "C" void* calloc(size_t n, size_t size) {
  void* p = __libc_calloc(n, size);
  Counted(p, 1);
  return p;
}
extern "C" void* realloc(void* old, size_t n) {
  Counted(old, -1);
  void* p = __libc_realloc(old, n);
  Counted(p != nullptr ? p : (n == 0 ? nullptr : old), 1);
  return p;
}
extern "C" void free(void* p) {
  Counted(p, -1);
  __libc_free(p);
}

namespace sluice {
namespace {

using testing::AnimatedWebp;
using testing::EncodeWebp;
using testing::SmoothPixels;
using testing::WebpCodec;

const Alpha kAlphas[] = {Alpha::kDrop, Alpha::kCompositeWhite, Alpha::kCompositeBlack};

TEST_CASE("ReadWebpHeaderGivesSizeCodingAlphaAndAnimation") {
  const std::vector<uint8_t> rgba = SmoothPixels(19, 7, 1);
  struct Case {
    WebpCodec codec;
    int channels;
    WebpCoding coding;
    bool alpha;
  };
  for (const Case& c : {Case{WebpCodec::kLossy, 3, WebpCoding::kLossy, false},
                        Case{WebpCodec::kLossy, 4, WebpCoding::kLossy, true},
                        Case{WebpCodec::kLossless, 3, WebpCoding::kLossless, false},
                        Case{WebpCodec::kLossless, 4, WebpCoding::kLossless, true}}) {
    const std::string webp = EncodeWebp(rgba.data(), 19, 7, c.channels, c.codec);
    Result<WebpHeader> h = ReadWebpHeader(webp);
    REQUIRE(h.ok());
    CHECK(h->width == 19);
    CHECK(h->height == 7);
    CHECK(h->coding == c.coding);
    CHECK(h->has_alpha == c.alpha);
    CHECK_FALSE(h->animated);
  }
  Result<WebpHeader> animated = ReadWebpHeader(AnimatedWebp(12, 10));
  REQUIRE(animated.ok());
  CHECK(animated->animated);
  CHECK(animated->coding == WebpCoding::kMixed);
  CHECK(animated->width == 12);
  CHECK(animated->height == 10);
}

TEST_CASE("LosslessWebpDecodesToItsPixelsUnderEveryAlphaPolicy") {
  const int w = 23, h = 17;
  const std::vector<uint8_t> rgba = SmoothPixels(w, h, 2);
  const std::string opaque = EncodeWebp(rgba.data(), w, h, 3, WebpCodec::kLossless);
  const std::string with_alpha = EncodeWebp(rgba.data(), w, h, 4, WebpCodec::kLosslessExact);
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  FlattenRgba(rgba.data(), static_cast<size_t>(w) * h, Alpha::kDrop, rgb.data());
  for (Alpha alpha : kAlphas) {
    Image out;
    REQUIRE(DecodeWebp(opaque, alpha, &out).ok());
    CHECK(out.width == w);
    CHECK(out.height == h);
    CHECK(out.pixels == rgb);  // no alpha: every policy gives the RGB
    REQUIRE(DecodeWebp(with_alpha, alpha, &out).ok());
    std::vector<uint8_t> expected(rgb.size());
    FlattenRgba(rgba.data(), static_cast<size_t>(w) * h, alpha, expected.data());
    CHECK(out.pixels == expected);
  }
}

TEST_CASE("LossyWebpDecodesCloseToItsSourceAndCompositesItsAlpha") {
  const int w = 32, h = 24;
  const std::vector<uint8_t> rgba = SmoothPixels(w, h, 3);
  const std::string webp = EncodeWebp(rgba.data(), w, h, 4, WebpCodec::kLossy);
  Image dropped, white, black;
  REQUIRE(DecodeWebp(webp, Alpha::kDrop, &dropped).ok());
  REQUIRE(DecodeWebp(webp, Alpha::kCompositeWhite, &white).ok());
  REQUIRE(DecodeWebp(webp, Alpha::kCompositeBlack, &black).ok());
  REQUIRE(dropped.pixels.size() == static_cast<size_t>(w) * h * 3);
  CHECK(white.pixels != dropped.pixels);
  CHECK(black.pixels != dropped.pixels);
  // Composited pixels lie between the background and the dropped-alpha colour.
  for (size_t i = 0; i < dropped.pixels.size(); ++i) {
    CHECK(white.pixels[i] >= dropped.pixels[i]);
    CHECK(black.pixels[i] <= dropped.pixels[i]);
  }
  // Where the pixel shows (the encoder may change the colour of transparent ones).
  int64_t error = 0, counted = 0;
  for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
    if (rgba[4 * i + 3] < 128) continue;
    for (int c = 0; c < 3; ++c) error += std::abs(dropped.pixels[3 * i + c] - rgba[4 * i + c]);
    counted += 3;
  }
  REQUIRE(counted > w * h);
  CHECK(error / counted < 12);  // quality 90 of a smooth image: a few levels off on average
}

TEST_CASE("AnimatedWebpIsInvalidArgumentSayingSo") {
  Image out;
  const Status s = DecodeWebp(AnimatedWebp(12, 10), Alpha::kDrop, &out);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "animated WebP (12x10 canvas) is not decoded: Sluice reads still images only");
}

TEST_CASE("NotAWebpIsInvalidArgumentNamingWhatItStartsWith") {
  Image out;
  const Status s = DecodeWebp(std::string("\xFF\xD8\xFF\xE0 a JPEG", 10), Alpha::kDrop, &out);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "not a WebP image (no RIFF....WEBP at byte 0; starts with 0xFF 0xD8 0xFF 0xE0)");
  CHECK(DecodeWebp("", Alpha::kDrop, &out).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("CutWebpIsRefusedAtEveryCutPoint") {
  const std::vector<uint8_t> rgba = SmoothPixels(21, 13, 4);
  for (const std::string& webp : {EncodeWebp(rgba.data(), 21, 13, 4, WebpCodec::kLossy),
                                  EncodeWebp(rgba.data(), 21, 13, 4, WebpCodec::kLosslessExact),
                                  testing::ManyGroupsWebp(21, 13, 11, 20, false),
                                  testing::ManyGroupsWebp(21, 13, 0, 20, true)}) {
    int data_loss = 0;
    for (size_t cut = 0; cut < webp.size(); ++cut) {
      for (Alpha alpha : kAlphas) {
        Image out;
        const Status s = DecodeWebp(webp.substr(0, cut), alpha, &out);
        INFO("cut at " << cut << ": " << s.ToString());
        REQUIRE_FALSE(s.ok());
        REQUIRE((s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kDataLoss));
        if (s.code() == StatusCode::kDataLoss) {
          CHECK(s.message().find("WebP data ends at byte " + std::to_string(cut)) == 0);
          ++data_loss;
        }
      }
    }
    CHECK(data_loss > 0);
  }
}

TEST_CASE("FlippedByteAnywhereIsAnErrorOrAnImageNeverACrash") {
  const std::vector<uint8_t> rgba = SmoothPixels(21, 13, 5);
  for (WebpCodec codec : {WebpCodec::kLossy, WebpCodec::kLosslessExact}) {
    const std::string webp = EncodeWebp(rgba.data(), 21, 13, 4, codec);
    int refused = 0;
    for (size_t at = 0; at < webp.size(); ++at) {
      std::string damaged = webp;
      damaged[at] = static_cast<char>(damaged[at] ^ 0x5A);
      Image out;
      const Status s = DecodeWebp(damaged, Alpha::kCompositeWhite, &out, 1 << 20);
      INFO("byte " << at << ": " << s.ToString());
      if (s.ok()) {
        CHECK(out.pixels.size() == static_cast<size_t>(out.width) * out.height * 3);
        continue;
      }
      ++refused;
      CHECK((s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kDataLoss));
    }
    CHECK(refused > 0);
  }
}

// libwebp's WebPGetFeatures reads the canvas of a VP8X with nothing after it and says OK.
TEST_CASE("Vp8xWithNoImageDataIsDataLossBeforeTheGate") {
  for (uint8_t flags : {uint8_t{0x10}, uint8_t{0x00}}) {
    const std::string webp = testing::Vp8xOnly(10000, 10000, flags);
    REQUIRE(webp.size() == 30);
    const Result<WebpHeader> header = ReadWebpHeader(webp);
    CHECK(header.status().code() == StatusCode::kDataLoss);
    CHECK(header.status().message() == "WebP data ends at byte 30 with no VP8/VP8L image data");
    int asked = 0;
    const DecodeMemoryGate gate = [&](int64_t) {
      ++asked;
      return Status::OK();
    };
    Image out;
    const Status s = DecodeWebp(webp, Alpha::kCompositeWhite, &out, kDefaultMaxPixels, &gate);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK(asked == 0);
    CHECK(out.pixels.capacity() == 0);
  }
}

// Non-conforming: libwebp applies the ALPH chunk, Pillow goes by the flags (opaque).
TEST_CASE("Vp8xAlphaFlagClearMeansOpaqueEvenWithAnAlphChunk") {
  const int w = 32, h = 24;
  const std::vector<uint8_t> rgba = SmoothPixels(w, h, 11);
  std::string webp = EncodeWebp(rgba.data(), w, h, 4, WebpCodec::kLossy);
  REQUIRE(webp.substr(12, 4) == "VP8X");
  REQUIRE(webp.substr(30, 4) == "ALPH");
  Image dropped;
  REQUIRE(DecodeWebp(webp, Alpha::kDrop, &dropped).ok());
  webp[20] = static_cast<char>(webp[20] & ~0x10);
  Result<WebpHeader> header = ReadWebpHeader(webp);
  REQUIRE(header.ok());
  CHECK_FALSE(header->has_alpha);
  CHECK(header->alpha_decoded);  // libwebp still decodes the ALPH chunk: the estimate counts it
  for (Alpha alpha : kAlphas) {
    Image out;
    REQUIRE(DecodeWebp(webp, alpha, &out).ok());
    CHECK(out.pixels == dropped.pixels);
  }
}

// The review's crafted file: 295 KB whose 65,536 Huffman groups make libwebp 1.2.4 allocate
// 1.3 GB of tables before it decodes a pixel. The gate hears of them from the header.
TEST_CASE("ManyGroupsFileIsRefusedByTheGateFromItsHeader") {
  for (bool as_alpha : {false, true}) {
    const std::string webp = testing::ManyGroupsWebp(1024, 1024, 11, 65536, as_alpha);
    Result<WebpHeader> header = ReadWebpHeader(webp);
    REQUIRE(header.ok());
    REQUIRE(ReadWebpHuffmanCodes(webp, &*header).ok());
    CHECK(header->huffman_bytes > 1'300'000'000);  // 1.3 GB
    std::vector<int64_t> asked;
    const DecodeMemoryGate share = [&](int64_t bytes) {
      asked.push_back(bytes);
      return bytes > (int64_t{512} << 20) ? ResourceExhausted("over the decode share")
                                          : Status::OK();
    };
    Image out;
    StartCounting();
    const Status s = DecodeWebp(webp, Alpha::kCompositeWhite, &out, kDefaultMaxPixels, &share);
    const int64_t peak = StopCounting();
    INFO((as_alpha ? "ALPH: " : "VP8L: ") << s.ToString());
    CHECK(s.code() == StatusCode::kResourceExhausted);
    REQUIRE(asked.size() == 1);
    CHECK(asked[0] == EstimateWebpDecodeBytes(*header, Alpha::kCompositeWhite));
    CHECK(out.pixels.capacity() == 0);
    CHECK(peak < int64_t{1} << 20);  // the entropy image (256 KB) the count read, no more
  }
}

TEST_CASE("ImageOverMaxPixelsIsRefusedNamingItsSizeBeforeTheGate") {
  const std::vector<uint8_t> rgba = SmoothPixels(40, 30, 6);
  const std::string webp = EncodeWebp(rgba.data(), 40, 30, 3, WebpCodec::kLossy);
  int asked = 0;
  const DecodeMemoryGate gate = [&](int64_t) {
    ++asked;
    return Status::OK();
  };
  Image out;
  const Status s = DecodeWebp(webp, Alpha::kDrop, &out, 1199, &gate);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "WebP of 40x30 = 1200 pixels exceeds max_pixels 1199");
  CHECK(asked == 0);
  CHECK(out.pixels.capacity() == 0);
  CHECK(DecodeWebp(webp, Alpha::kDrop, &out, 1200, &gate).ok());
  CHECK(asked == 1);
}

TEST_CASE("MemoryGateIsAskedOnceForTheEstimateAndItsRefusalAllocatesNothing") {
  const std::vector<uint8_t> rgba = SmoothPixels(40, 30, 7);
  const std::string webp = EncodeWebp(rgba.data(), 40, 30, 4, WebpCodec::kLossy);
  Result<WebpHeader> header = ReadWebpHeader(webp);
  REQUIRE(header.ok());
  REQUIRE(ReadWebpHuffmanCodes(webp, &*header).ok());
  for (Alpha alpha : kAlphas) {
    std::vector<int64_t> asked;
    const DecodeMemoryGate refuse = [&](int64_t bytes) {
      asked.push_back(bytes);
      return ResourceExhausted("over the decode share");
    };
    Image out;
    const Status s = DecodeWebp(webp, alpha, &out, kDefaultMaxPixels, &refuse);
    CHECK(s.code() == StatusCode::kResourceExhausted);
    CHECK(asked == std::vector<int64_t>{EstimateWebpDecodeBytes(*header, alpha)});
    CHECK(out.pixels.capacity() == 0);
  }
  // Compositing decodes RGBA: the estimate counts the fourth byte.
  CHECK(EstimateWebpDecodeBytes(*header, Alpha::kCompositeWhite) -
            EstimateWebpDecodeBytes(*header, Alpha::kDrop) ==
        40 * 30);
}

TEST_CASE("DecodingIntoAKeptImageAllocatesOnlyTheNewSize") {
  const std::vector<uint8_t> rgba = SmoothPixels(64, 48, 8);
  const std::string small = EncodeWebp(rgba.data(), 16, 12, 4, WebpCodec::kLossy);
  const std::string large = EncodeWebp(rgba.data(), 64, 48, 4, WebpCodec::kLosslessExact);
  Image out;
  REQUIRE(DecodeWebp(small, Alpha::kDrop, &out).ok());
  REQUIRE(DecodeWebp(large, Alpha::kCompositeBlack, &out).ok());
  CHECK(out.pixels.capacity() == size_t{64} * 48 * 4);  // the RGBA it decoded, exactly
  REQUIRE(DecodeWebp(large, Alpha::kDrop, &out).ok());
  CHECK(out.pixels.size() == size_t{64} * 48 * 3);
}

// The most bytes the process holds at once during a decode (libwebp's every allocation and the
// pixels) against EstimateWebpDecodeBytes, for each coding with and without alpha under each
// policy: smooth photograph-like pixels, blocky content whose lossless coding takes hundreds of
// Huffman groups, a photograph (Debian's mate-backgrounds, which the test requires), and crafted
// files whose entropy image names thousands of groups, as the image or as a lossy image's alpha.
TEST_CASE("LibwebpStaysWithinTheEstimate") {
  struct Content {
    std::string name;
    int w, h;
    std::vector<uint8_t> rgba;
  };
  std::vector<Content> contents = {{"smooth", 640, 480, SmoothPixels(640, 480, 9)},
                                   {"blocky", 1000, 750, testing::BlockyPixels(1000, 750, 10)}};
  const std::string photo_path = "/usr/share/backgrounds/mate/nature/Blinds.jpg";
  {
    std::ifstream photo{photo_path, std::ios::binary};
    INFO(photo_path << " is missing: deploy/install-deps.sh installs Debian's mate-backgrounds");
    REQUIRE(photo);
    const std::string jpeg{std::istreambuf_iterator<char>(photo), {}};
    JpegDecoder decoder;
    Image rgb;
    REQUIRE(decoder.Decode(jpeg, &rgb).ok());
    Content c{"photo", std::min(rgb.width, 800), std::min(rgb.height, 600), {}};
    for (int y = 0; y < c.h; ++y) {
      for (int x = 0; x < c.w; ++x) {
        const uint8_t* px = &rgb.pixels[(static_cast<size_t>(y) * rgb.width + x) * 3];
        c.rgba.insert(c.rgba.end(), {px[0], px[1], px[2], static_cast<uint8_t>(x * 255 / c.w)});
      }
    }
    contents.push_back(std::move(c));
  }
  struct File {
    std::string name;
    int w, h;
    std::string webp;
  };
  std::vector<File> files;
  for (const Content& content : contents) {
    for (WebpCodec codec : {WebpCodec::kLossy, WebpCodec::kLossless}) {
      for (int channels : {3, 4}) {
        files.push_back({content.name + (codec == WebpCodec::kLossy ? " lossy " : " lossless ") +
                             std::to_string(channels) + " channels",
                         content.w, content.h,
                         EncodeWebp(content.rgba.data(), content.w, content.h, channels, codec)});
      }
    }
  }
  // Crafted: an entropy image naming a Huffman group for each 4x4 tile, all of whose tables
  // libwebp allocates at once (remapped past 1000 groups), with and without a colour cache, as
  // the image and as a lossy image's alpha.
  struct Crafted {
    int size, cache_bits, groups;
    bool as_alpha;
  };
  for (const Crafted& c :
       {Crafted{256, 11, 4096, false}, Crafted{256, 0, 4096, false}, Crafted{64, 11, 256, false},
        Crafted{128, 4, 1001, false}, Crafted{256, 11, 4096, true}, Crafted{256, 0, 2000, true}}) {
    files.push_back({"crafted " + std::to_string(c.groups) + " groups, cache " +
                         std::to_string(c.cache_bits) + (c.as_alpha ? " bits, in ALPH" : " bits"),
                     c.size, c.size,
                     testing::ManyGroupsWebp(c.size, c.size, c.cache_bits, c.groups, c.as_alpha)});
  }
  for (const File& file : files) {
    Result<WebpHeader> header = ReadWebpHeader(file.webp);
    REQUIRE(header.ok());
    REQUIRE(ReadWebpHuffmanCodes(file.webp, &*header).ok());
    for (Alpha alpha : kAlphas) {
      Image out;
      StartCounting();
      const Status s = DecodeWebp(file.webp, alpha, &out);
      const int64_t peak = StopCounting();
      INFO(file.name << ", alpha " << static_cast<int>(alpha) << ": " << s.ToString() << ", peak "
                     << peak << ", estimate " << EstimateWebpDecodeBytes(*header, alpha)
                     << ", Huffman tables " << header->huffman_bytes);
      REQUIRE(s.ok());
      const int64_t estimate = EstimateWebpDecodeBytes(*header, alpha);
      CHECK(peak > int64_t{file.w} * file.h * 3);
      CHECK(peak <= estimate);
      // An encoder's file is not charged for tables it does not have.
      if (file.name.rfind("crafted", 0) != 0) CHECK(estimate <= 2 * peak + kWebpFixedBytes);
    }
  }
}

}  // namespace
}  // namespace sluice

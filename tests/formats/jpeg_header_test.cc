#include "formats/jpeg_header.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// clang-format off
// jpeglib.h uses FILE and size_t without declaring them: <cstdio> must come first.
#include <jpeglib.h>
#include "tests/jpeg_test_images.h"
// clang-format on

namespace sluice {
namespace {

// Hand-built marker streams: each helper returns the bytes of one segment.
const std::string kSoi("\xFF\xD8", 2);

std::string Segment(uint8_t marker, const std::string& body) {
  std::string s("\xFF", 1);
  s += static_cast<char>(marker);
  const size_t len = body.size() + 2;
  s += static_cast<char>(len >> 8);
  s += static_cast<char>(len & 0xFF);
  return s + body;
}

std::string Sof(uint8_t marker, int width, int height, const std::vector<int>& ids) {
  std::string b;
  b += '\x08';
  b += static_cast<char>(height >> 8);
  b += static_cast<char>(height & 0xFF);
  b += static_cast<char>(width >> 8);
  b += static_cast<char>(width & 0xFF);
  b += static_cast<char>(ids.size());
  for (int id : ids) {
    b += static_cast<char>(id);
    b += '\x11';
    b += '\x00';
  }
  return Segment(marker, b);
}

std::string Jfif() {
  return Segment(0xE0, std::string("JFIF\0\x01\x01\x00\x00\x01\x00\x01\0\0", 14));
}

std::string Adobe(int transform) {
  std::string b("Adobe\x00\x64\0\0\0\0", 11);
  b += static_cast<char>(transform);
  return Segment(0xEE, b);
}

std::string Dqt() { return Segment(0xDB, std::string(65, '\x01')); }
std::string Sos() { return Segment(0xDA, std::string("\x01\x01\x00\x00\x3F\x00", 6)); }

const std::vector<int> kYcc = {1, 2, 3};

JpegHeader Parse(const std::string& data) {
  auto r = ReadJpegHeader(data);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

// Encodes a flat image of the given kind with the libjpeg API.
std::string EncodeWithLibjpeg(int width, int height, J_COLOR_SPACE in_space,
                              J_COLOR_SPACE jpeg_space, bool progressive) {
  const std::vector<uint8_t> pixels(
      static_cast<size_t>(width) * height * testing::InputComponents(in_space), 90);
  testing::LibjpegSpec spec{in_space, jpeg_space, progressive, 75};
  return testing::EncodeWithLibjpeg(pixels, width, height, spec);
}

TEST_CASE("HeaderSizesMatchForAllKinds") {
  struct Case {
    J_COLOR_SPACE in, jpeg;
    int components;
    JpegColorSpace expected;
  };
  const Case cases[] = {
      {JCS_GRAYSCALE, JCS_GRAYSCALE, 1, JpegColorSpace::kGray},
      {JCS_RGB, JCS_YCbCr, 3, JpegColorSpace::kYCbCr},
      {JCS_RGB, JCS_RGB, 3, JpegColorSpace::kRGB},
      {JCS_CMYK, JCS_CMYK, 4, JpegColorSpace::kCMYK},
      {JCS_CMYK, JCS_YCCK, 4, JpegColorSpace::kYCCK},
  };
  for (const Case& c : cases) {
    for (bool progressive : {false, true}) {
      INFO("kind " << JpegColorSpaceName(c.expected) << " progressive " << progressive);
      const JpegHeader h = Parse(EncodeWithLibjpeg(301, 77, c.in, c.jpeg, progressive));
      CHECK(h.width == 301);
      CHECK(h.height == 77);
      CHECK(h.components == c.components);
      CHECK(h.color_space == c.expected);
      CHECK(h.progressive == progressive);
    }
  }
}

TEST_CASE("FillBytesAndStandaloneMarkersAreSkipped") {
  // 0xFF fill before markers, then TEM and RST markers (no length field) between segments.
  const std::string data = kSoi + "\xFF\xFF\xFF" + Jfif() + "\xFF\x01" + "\xFF\xD3" + "\xFF\xFF" +
                           Dqt() + Sof(0xC0, 640, 480, kYcc) + Sos();
  const JpegHeader h = Parse(data);
  CHECK(h.width == 640);
  CHECK(h.height == 480);
  CHECK(h.components == 3);
  CHECK(h.color_space == JpegColorSpace::kYCbCr);
  CHECK_FALSE(h.progressive);
}

TEST_CASE("DhtJpgAndDacAreNotFrameMarkers") {
  // C4, C8 and CC sit in the SOF range but are tables / reserved; their bodies must be skipped,
  // even when they look like a frame header.
  const std::string fake = Sof(0xC4, 1, 1, kYcc).substr(4);
  const std::string data = kSoi + Segment(0xC4, fake) + Segment(0xC8, fake) + Segment(0xCC, fake) +
                           Sof(0xC1, 100, 50, kYcc) + Sos();
  const JpegHeader h = Parse(data);
  CHECK(h.width == 100);
  CHECK(h.height == 50);
}

TEST_CASE("ProgressiveIsSof2Sof6Sof10Sof14") {
  for (int m = 0xC0; m <= 0xCF; ++m) {
    if (m == 0xC4 || m == 0xC8 || m == 0xCC) continue;
    INFO("SOF marker " << m);
    const JpegHeader h = Parse(kSoi + Sof(static_cast<uint8_t>(m), 8, 8, {1}));
    CHECK(h.progressive == (m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE));
    CHECK(h.color_space == JpegColorSpace::kGray);
  }
}

TEST_CASE("AdobeTransformDecidesColorSpace") {
  struct Case {
    std::string markers;
    std::vector<int> ids;
    JpegColorSpace expected;
  };
  const std::vector<int> rgb_ids = {'R', 'G', 'B'};
  const Case cases[] = {
      {"", kYcc, JpegColorSpace::kYCbCr},
      {"", rgb_ids, JpegColorSpace::kRGB},        // guessed from component ids
      {"", {7, 8, 9}, JpegColorSpace::kYCbCr},    // unknown ids: libjpeg assumes YCbCr
      {Jfif(), rgb_ids, JpegColorSpace::kYCbCr},  // JFIF implies YCbCr, whatever the ids
      {Adobe(0), kYcc, JpegColorSpace::kRGB},
      {Adobe(1), rgb_ids, JpegColorSpace::kYCbCr},
      {Adobe(0), {1, 2, 3, 4}, JpegColorSpace::kCMYK},
      {Adobe(2), {1, 2, 3, 4}, JpegColorSpace::kYCCK},
      {Adobe(7), {1, 2, 3, 4}, JpegColorSpace::kYCCK},  // bad transform: libjpeg assumes YCCK
      {"", {1, 2, 3, 4}, JpegColorSpace::kCMYK},
      {"", {1, 2}, JpegColorSpace::kUnknown},
      // Too short to count as an Adobe marker (libjpeg needs 12 bytes of data).
      {Segment(0xEE, "Adobe\x00\x64"), kYcc, JpegColorSpace::kYCbCr},
  };
  for (const Case& c : cases) {
    const JpegHeader h = Parse(kSoi + c.markers + Sof(0xC0, 16, 16, c.ids) + Sos());
    INFO("components " << c.ids.size() << " got " << JpegColorSpaceName(h.color_space));
    CHECK(h.components == static_cast<int>(c.ids.size()));
    CHECK(h.color_space == c.expected);
  }
}

TEST_CASE("AdobeMarkerAfterSofIsHonoured") {
  const JpegHeader h = Parse(kSoi + Sof(0xC0, 16, 16, {1, 2, 3, 4}) + Adobe(2) + Dqt() + Sos());
  CHECK(h.color_space == JpegColorSpace::kYCCK);
  // Damage after the SOF does not hide the size.
  const JpegHeader cut = Parse(kSoi + Sof(0xC0, 16, 16, {1, 2, 3, 4}) + "\xFF\xEE\x00");
  CHECK(cut.width == 16);
  CHECK(cut.color_space == JpegColorSpace::kCMYK);
}

TEST_CASE("TruncatedHeaderNamesOffset") {
  const std::string full = kSoi + Jfif() + Dqt() + Sof(0xC2, 1024, 768, kYcc) + Sos();
  const size_t sof_end = full.size() - Sos().size();
  // Every prefix that ends before the SOF is complete fails, in its own exactly-sized buffer so a
  // read past the end would show under sanitizers.
  for (size_t n = 0; n < sof_end; ++n) {
    const std::vector<char> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = ReadJpegHeader(std::string_view(prefix.data(), n));
    INFO("prefix of " << n << " bytes: " << r.status().ToString());
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.status().code() == StatusCode::kInvalidArgument);
    if (n >= 2) REQUIRE(r.status().message().find("offset") != std::string::npos);
  }
  REQUIRE(Parse(full.substr(0, sof_end)).width == 1024);

  // Cut inside the DQT segment (starting at 2 + 18): the message gives where the data ended.
  auto r = ReadJpegHeader(std::string_view(full).substr(0, 30));
  REQUIRE(r.status().message() ==
          "JPEG header truncated in marker 0xDB segment (67 bytes from offset 22) at offset 30");
  r = ReadJpegHeader(std::string_view(full).substr(0, 2));
  REQUIRE(r.status().message() == "JPEG header truncated before a marker at offset 2");
}

TEST_CASE("MalformedHeadersNameOffset") {
  struct Case {
    std::string data;
    std::string message;
  };
  const Case cases[] = {
      {kSoi + Sos(), "JPEG header has SOS before any SOF marker at offset 2"},
      {kSoi + Dqt() + "\xFF\xD9", "JPEG header ends (EOI) before any SOF marker at offset 71"},
      {kSoi + kSoi, "JPEG header has a second SOI marker at offset 2"},
      {kSoi + std::string("\xFF\xE1\x00\x01", 4),
       "JPEG header has bad length 1 for marker 0xE1 at offset 4"},
      {kSoi + Sof(0xC0, 0, 10, kYcc), "JPEG header has empty image size 0x10 in SOF at offset 7"},
      {kSoi + Sof(0xC0, 10, 10, {}), "JPEG header has no components in SOF at offset 11"},
      {kSoi + Segment(0xC0, std::string("\x08\x00\x10\x00\x10\x03\x01", 7)),
       "JPEG header has SOF too short for 3 components at offset 13"},
  };
  for (const Case& c : cases) {
    auto r = ReadJpegHeader(c.data);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message() == c.message);
  }
}

TEST_CASE("StrayBytesBeforeMarkerAreSkippedLikeLibjpeg") {
  // libjpeg warns about "extraneous bytes before marker" and carries on; so do we.
  const JpegHeader h = Parse(kSoi + Dqt() + std::string("junk\xFF\x00", 6) + Sof(0xC0, 9, 7, {1}));
  CHECK(h.width == 9);
  CHECK(h.height == 7);
}

TEST_CASE("NotJpegNamesWhatItIs") {
  struct Case {
    std::string data;
    std::string message;
  };
  const Case cases[] = {
      {std::string("\x89PNG\r\n\x1A\n\0\0\0\x0DIHDR", 16), "PNG image, not JPEG"},
      {"GIF89a\x01\x00", "GIF image, not JPEG"},
      {"", "empty data, not JPEG"},
      {"hello", "not a JPEG image (starts with 0x68 0x65 0x6C 0x6C)"},
  };
  for (const Case& c : cases) {
    auto r = ReadJpegHeader(c.data);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message() == c.message);
  }
}

TEST_CASE("SniffImageFormatByMagicBytes") {
  struct Case {
    std::string data;
    std::string_view format;
  };
  const Case cases[] = {
      {"", "empty"},
      {"\xFF\xD8\xFF\xE0", "JPEG"},
      {std::string("\x89PNG\r\n\x1A\n", 8), "PNG"},
      {"GIF87a", "GIF"},
      {"GIF89a", "GIF"},
      {std::string("RIFF\x10\0\0\0WEBPVP8 ", 16), "WebP"},
      {std::string("RIFF\x10\0\0\0WAVE", 12), "unknown"},
      {"BM6", "BMP"},
      {std::string("II*\0", 4), "TIFF"},
      {std::string("MM\0*", 4), "TIFF"},
      {"\xFF", "unknown"},
      {"text", "unknown"},
  };
  for (const Case& c : cases) {
    INFO("format " << c.format);
    CHECK(SniffImageFormat(c.data) == c.format);
  }
}

}  // namespace
}  // namespace sluice

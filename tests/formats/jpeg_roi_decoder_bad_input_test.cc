// The ROI decoder on bad input: images over the pixel limit, crops outside the image, corrupt and
// truncated data as a status, and a decoder reusable after every kind of error.
#include "formats/jpeg_roi_decoder.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "formats/crop_window.h"
#include "tests/formats/jpeg_roi_decoder_test_support.h"

namespace sluice {
namespace {

using roi_testing::Decode;
using roi_testing::Describe;
using roi_testing::EncodeYCbCr;
using roi_testing::FullDecode;
using roi_testing::Reference;
using roi_testing::TexturedJpeg;

TEST_CASE("ImageOverMaxPixelsIsRefusedBeforeDecoding") {
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(8 * 8 * 3, 0x5A);
  // A header claiming 65000x65000 over a few hundred bytes of data: decoding it would allocate
  // for 4.2 gigapixels. It must be refused from the header, naming both numbers.
  const std::string huge = testing::WithFrameSize(TexturedJpeg(16, 16, {2, 2}), 65000, 65000);
  Status s = decoder.DecodeCrop(huge, {0, 0, 64, 64}, 8, 8, false, out.data(), 24);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("65000x65000") && Catch::Contains("4225000000") &&
                              Catch::Contains(std::to_string(kDefaultMaxPixels)));
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0x5A; }));
  const Result<JpegHeader> header = decoder.ReadHeader(huge);
  CHECK(header.status().code() == StatusCode::kInvalidArgument);

  // The limit is inclusive.
  const std::string jpeg = TexturedJpeg(40, 30, {2, 2});
  s = decoder.DecodeCrop(jpeg, {0, 0, 40, 30}, 8, 8, false, out.data(), 24, 40 * 30 - 1);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("1200") && Catch::Contains("1199"));
  CHECK(decoder.ReadHeader(jpeg, 40 * 30 - 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, {0, 0, 40, 30}, 8, 8, false, out.data(), 24, 40 * 30).ok());
  CHECK(decoder.ReadHeader(jpeg, 40 * 30).ok());
}

// A baseline bomb (a huge frame over little data) is asked for its memory from the header: the
// gate sees the estimate of the decoded crop's rows and libjpeg's, and its refusal is the result,
// before anything is allocated or written. An ordinary image passes the same gate and decodes.
TEST_CASE("DecodeMemoryGateRefusalStopsTheDecodeBeforeAllocating") {
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(8 * 8 * 3, 0x5A);
  const std::string bomb = testing::WithFrameSize(TexturedJpeg(16, 16, {2, 2}), 9000, 9000);
  int64_t asked = 0;
  const DecodeMemoryGate refuse = [&asked](int64_t bytes) {
    asked = bytes;
    return ResourceExhausted("no room for " + std::to_string(bytes));
  };
  // At full scale (an 8x8 output of a 4000x4000 crop would pick 1/8; ask for 600x600).
  std::vector<uint8_t> big(600 * 600 * 3, 0x5A);
  Status s = decoder.DecodeCrop(bomb, {0, 0, 4000, 4000}, 600, 600, false, big.data(), 1800,
                                kDefaultMaxPixels, nullptr, &refuse);
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(s.message() == "9000x9000 baseline JPEG: no room for " + std::to_string(asked));
  // The crop at 1/4 scale: 1000x1000 RGB rows at least.
  CHECK(asked >= 1000 * 1000 * 3);
  CHECK(std::all_of(big.begin(), big.end(), [](uint8_t v) { return v == 0x5A; }));

  int64_t allowed = 0;
  const DecodeMemoryGate allow = [&allowed](int64_t bytes) {
    allowed = bytes;
    return Status::OK();
  };
  const std::string jpeg = TexturedJpeg(40, 30, {2, 2});
  s = decoder.DecodeCrop(jpeg, {0, 0, 40, 30}, 8, 8, false, out.data(), 24, kDefaultMaxPixels,
                         nullptr, &allow);
  REQUIRE(s.ok());
  CHECK(allowed > 40 * 30 * 3);
  CHECK(allowed < 1 << 20);
}

TEST_CASE("CropOutsideTheImageOrBadOutputIsInvalidArgument") {
  const std::string jpeg = TexturedJpeg(40, 30, {2, 2});
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(16 * 16 * 3);
  for (const CropWindow& c :
       {CropWindow{-1, 0, 10, 10}, CropWindow{0, -1, 10, 10}, CropWindow{31, 0, 10, 10},
        CropWindow{0, 21, 10, 10}, CropWindow{0, 0, 0, 10}, CropWindow{0, 0, 10, 0},
        CropWindow{0, 0, 41, 30}, CropWindow{0, 0, 40, 31}}) {
    INFO(Describe(c, 16, 16, false));
    const Status s = decoder.DecodeCrop(jpeg, c, 16, 16, false, out.data(), 48);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("40x30"));
  }
  const CropWindow whole{0, 0, 40, 30};
  CHECK(decoder.DecodeCrop(jpeg, whole, 0, 16, false, out.data(), 48).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 0, false, out.data(), 48).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 16, false, out.data(), 47).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 16, false, nullptr, 48).code() ==
        StatusCode::kInvalidArgument);
  CHECK(decoder.DecodeCrop(jpeg, whole, 16, 16, false, out.data(), 48).ok());
}

// Noise makes the entropy-coded data long and spread evenly over the rows, so a cut at a given
// fraction of the bytes lands near the same fraction of the rows.
std::string NoisyJpeg(int width, int height, bool progressive) {
  std::mt19937 rng(7);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  for (auto& v : pixels) v = static_cast<uint8_t>(rng());
  return EncodeYCbCr(
      width, height,
      [&](int x, int y, int ch) { return pixels[(static_cast<size_t>(y) * width + x) * 3 + ch]; },
      {2, 2}, progressive, 90);
}

TEST_CASE("CorruptOrTruncatedDataIsAStatusNotACrash") {
  JpegRoiDecoder decoder;
  std::vector<uint8_t> out(32 * 32 * 3);
  auto decode = [&](std::string_view data, const CropWindow& c) {
    return decoder.DecodeCrop(data, c, 32, 32, false, out.data(), 96);
  };
  const CropWindow small{0, 0, 16, 16};
  CHECK(decode("", small).code() == StatusCode::kInvalidArgument);
  CHECK(decode("not a jpeg at all", small).code() == StatusCode::kInvalidArgument);
  CHECK_THAT(decode("\x89PNG\r\n\x1a\n0000000000000000", small).message(), Catch::Contains("PNG"));
  CHECK(decode(std::string_view("\xFF\xD8", 2), small).code() == StatusCode::kInvalidArgument);

  for (bool progressive : {false, true}) {
    const std::string jpeg = NoisyJpeg(256, 192, progressive);
    // Cut inside the header, and inside the entropy data with the crop reaching the bottom.
    for (size_t cut : {size_t{10}, size_t{100}, jpeg.size() / 3, jpeg.size() * 2 / 3}) {
      INFO((progressive ? "progressive" : "baseline")
           << " cut at " << cut << " of " << jpeg.size());
      const Status s = decode(std::string_view(jpeg).substr(0, cut), {0, 96, 256, 96});
      CHECK(s.code() == StatusCode::kInvalidArgument);
    }
  }

  // Flipped bytes anywhere: libjpeg patches what it can; whatever happens, a Status comes back.
  const std::string jpeg = TexturedJpeg(129, 97, {2, 2});
  std::mt19937 rng(3);
  int failures = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = jpeg;
    for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    const Result<JpegHeader> header = decoder.ReadHeader(bad);
    if (!header.ok()) {
      ++failures;
      continue;
    }
    const CropWindow c{0, 0, std::min(header->width, 64), std::min(header->height, 64)};
    if (!decoder.DecodeCrop(bad, c, 32, 32, i % 2 == 0, out.data(), 96).ok()) ++failures;
  }
  CHECK(failures > 0);
}

TEST_CASE("TruncatedBelowTheCropStillDecodesTheCropExactly") {
  // Decoding stops after the crop's last row, so bytes past it are never needed: a baseline file
  // cut in its lower half gives the same crop of its upper rows as the complete file.
  const std::string jpeg = NoisyJpeg(256, 192, false);
  const std::string cut = jpeg.substr(0, jpeg.size() * 6 / 10);
  JpegRoiDecoder decoder;
  const CropWindow c{40, 8, 150, 40};
  const auto whole = Decode(decoder, jpeg, c, 150, 40, false);
  CHECK(Decode(decoder, cut, c, 150, 40, false) == whole);
}

TEST_CASE("DecoderIsReusableAfterEveryKindOfError") {
  const std::string good = TexturedJpeg(301, 217, {2, 2});
  const std::string noisy = NoisyJpeg(256, 192, false);
  const CropWindow c{20, 30, 200, 150};
  JpegRoiDecoder fresh;
  const auto want = Decode(fresh, good, c, 50, 40, true);

  JpegRoiDecoder reused;
  std::vector<uint8_t> out(50 * 40 * 3);
  auto decode_good = [&] { return Decode(reused, good, c, 50, 40, true); };
  CHECK(!reused.DecodeCrop("garbage", c, 50, 40, true, out.data(), 150).ok());
  CHECK(decode_good() == want);
  CHECK(!reused
             .DecodeCrop(noisy.substr(0, noisy.size() / 2), {0, 0, 256, 192}, 50, 40, true,
                         out.data(), 150)
             .ok());
  CHECK(decode_good() == want);
  CHECK(!reused.DecodeCrop(good, c, 50, 40, true, out.data(), 150, 1000).ok());
  CHECK(decode_good() == want);
  CHECK(!reused.DecodeCrop(good, {0, 0, 302, 10}, 50, 40, true, out.data(), 150).ok());
  CHECK(decode_good() == want);
  CHECK(!reused.ReadHeader(testing::WithFrameSize(good, 65000, 65000)).ok());
  CHECK(decode_good() == want);
  // A header read leaves nothing behind either.
  CHECK(reused.ReadHeader(noisy).ok());
  CHECK(decode_good() == want);
}

}  // namespace
}  // namespace sluice

// WebP records through the whole pipeline: told from JPEG and PNG by their RIFF header, decoded
// whole within the decode budget, cropped and resized as the plan says, their alpha per
// PipelineOptions.alpha, and their damage (a cut file, an animation) skipped or failed naming
// file and offset.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/webp_codec.h"
#include "tests/pipeline/pipeline_image_test_support.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/webp_test_images.h"

namespace sluice {
namespace {

using testing::CheckDecodePoolHeldUnderItsLimit;
using testing::EncodeWebp;
using testing::EveryModeAndAlpha;
using testing::InOrder;
using testing::Iota;
using testing::ModeAndAlpha;
using testing::RecentErrors;
using testing::RunInOrderUnderBudget;
using testing::RunToEnd;
using testing::SmoothPixels;
using testing::TempDir;
using testing::WebpCodec;

// Lossless (exact) WebPs, so the pixels they hold are known: sizes, and alpha or none.
struct Still {
  int width, height, channels;
  std::vector<uint8_t> rgba;
  std::string webp;
};

std::vector<Still> MixedWebps() {
  std::vector<Still> stills = {{80, 60, 4, {}, {}},
                               {70, 90, 3, {}, {}},
                               {64, 64, 4, {}, {}},
                               {101, 47, 3, {}, {}},
                               {45, 45, 4, {}, {}}};
  for (size_t i = 0; i < stills.size(); ++i) {
    Still& s = stills[i];
    s.rgba = SmoothPixels(s.width, s.height, static_cast<uint32_t>(200 + i));
    s.webp = EncodeWebp(s.rgba.data(), s.width, s.height, s.channels, WebpCodec::kLosslessExact);
  }
  return stills;
}

// The stills' files, in order.
std::vector<std::string> FilesOf(const std::vector<Still>& stills) {
  std::vector<std::string> files;
  for (const Still& s : stills) files.push_back(s.webp);
  return files;
}

// The RGB a still decodes to under alpha.
std::vector<uint8_t> ExpectedRgb(const Still& s, Alpha alpha) {
  std::vector<uint8_t> rgb(static_cast<size_t>(s.width) * s.height * 3);
  FlattenRgba(s.rgba.data(), static_cast<size_t>(s.width) * s.height,
              s.channels == 4 ? alpha : Alpha::kDrop, rgb.data());
  return rgb;
}

// Writes each image as a record (label = its index) and returns each record's offset.
std::vector<uint64_t> WriteShard(const std::string& path, const std::vector<std::string>& images) {
  return testing::WriteImageShard(path, images, "x.webp", "WEBP");
}

TEST_CASE("WebpRecordsBatchAsTheirPixelsRenderedByThePlanUnderEveryModeAndAlpha") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  WriteShard(dir.file("shard-0.tfrecord"), FilesOf(stills));

  for (const ModeAndAlpha& c : EveryModeAndAlpha()) {
    INFO("mode " << v1::Mode_Name(c.mode) << ", " << v1::Alpha_Name(c.alpha));
    const v1::PipelineOptions o = testing::InOrderAs(dir, c);
    StatsSnapshot stats;
    const testing::Collected got = testing::RunOneEpochInOrder(o, stills.size(), &stats);
    CHECK(stats.webp_decodes == stills.size());
    CHECK(stats.png_decodes == 0);
    CHECK(stats.jpeg_decodes == 0);

    // The same plan (same random draws) rendered from the pixels the WebP holds.
    testing::CheckEveryImageRenderedByThePlan(got, o, stills.size(), [&](size_t k) {
      const Still& s = stills[k];
      return testing::ExpectedImage{ExpectedRgb(s, c.expected_alpha), s.width, s.height};
    });
  }
}

TEST_CASE("DamagedOrAnimatedWebpRecordIsSkippedOrFailsNamingFileAndOffset") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  std::vector<std::string> images;
  for (int i = 0; i < 4; ++i) images.push_back(stills[i].webp);
  const std::string cut = images[1].substr(0, images[1].size() / 2);
  images[1] = cut;
  images.push_back(testing::AnimatedWebp(12, 10));
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  const std::string at = path + ":";
  testing::CheckDamageIsSkippedOrFails(
      dir, {0, 2, 3},
      {at + std::to_string(offsets[1]) + ": WebP data ends at byte " + std::to_string(cut.size()),
       at + std::to_string(offsets[4]) + ": animated WebP (12x10 canvas) is not decoded"},
      at + std::to_string(offsets[1]) + ": ");
}

// A 3000x3000 WebP (27 MB of pixels) is over the ~10 MB decode share of a 64 MiB budget: refused
// from its header, before libwebp or the pixels take anything; the small ones decode within it.
TEST_CASE("WebpOverTheDecodeShareIsRefusedFromItsHeader") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  std::vector<std::string> images = FilesOf(stills);
  const std::vector<uint8_t> flat(size_t{3000} * 3000 * 4, 128);
  images.push_back(EncodeWebp(flat.data(), 3000, 3000, 3, WebpCodec::kLossy));
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  StatsSnapshot stats;
  const testing::Collected got = RunInOrderUnderBudget(dir, 64 << 20, &stats);
  REQUIRE(got.status.ok());
  CHECK(got.labels_by_epoch[0] == Iota(static_cast<int>(stills.size())));
  CHECK(got.skipped == 1);
  REQUIRE(stats.recent_errors.size() == 1);
  CHECK(stats.recent_errors[0].find(path + ":" + std::to_string(offsets.back()) +
                                    ": decoding it needs an estimated 29") != std::string::npos);
  CHECK(stats.webp_decodes == stills.size() + 1);  // counted as its decode starts, as a PNG's
  CheckDecodePoolHeldUnderItsLimit(stats);
}

// A 256x256 lossless WebP whose entropy image names 4096 Huffman groups makes libwebp allocate
// 85 MB of tables before a pixel (51 MB without a colour cache, as a lossy image's alpha): over
// the ~10 MB decode share of a 64 MiB budget, refused from its header like a large image.
TEST_CASE("WebpWhoseHuffmanTablesExceedTheDecodeShareIsRefusedFromItsHeader") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  std::vector<std::string> images = FilesOf(stills);
  images.push_back(testing::ManyGroupsWebp(256, 256, 11, 4096, false));
  images.push_back(testing::ManyGroupsWebp(256, 256, 0, 4096, true));
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  StatsSnapshot stats;
  const testing::Collected got = RunInOrderUnderBudget(dir, 64 << 20, &stats);
  REQUIRE(got.status.ok());
  CHECK(got.labels_by_epoch[0] == Iota(static_cast<int>(stills.size())));
  CHECK(got.skipped == 2);
  const std::string errors = RecentErrors(stats);
  INFO(errors);
  for (size_t i = stills.size(); i < images.size(); ++i) {
    CHECK(errors.find(path + ":" + std::to_string(offsets[i]) +
                      ": decoding it needs an estimated ") != std::string::npos);
  }
  for (const auto& p : stats.pools) {
    if (p.name != "decode") continue;
    CHECK(p.peak_bytes <= p.limit_bytes);
    CHECK(p.limit_bytes < int64_t{50} << 20);
  }
}

}  // namespace
}  // namespace sluice

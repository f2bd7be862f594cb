// PNG records through the whole pipeline: told from JPEG by their signature, decoded whole within
// the decode budget, cropped and resized as the plan says, their alpha per PipelineOptions.alpha,
// cached by the DECODED cache, and their damage skipped or failed naming file and offset.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/png_codec.h"
#include "tests/pipeline/pipeline_image_test_support.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/png_test_images.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::CheckDecodePoolHeldUnderItsLimit;
using testing::EveryModeAndAlpha;
using testing::InOrder;
using testing::Iota;
using testing::ModeAndAlpha;
using testing::PngSpec;
using testing::RecentErrors;
using testing::RunToEnd;
using testing::Sorted;
using testing::TempDir;

// Images of every kind of layout and size, each label its index. Most have alpha.
std::vector<PngSpec> MixedPngs() {
  struct Shape {
    PngColorType type;
    int depth;
    bool trns;
    bool interlaced;
    int width, height;
  };
  const std::vector<Shape> shapes = {
      {PngColorType::kRgbAlpha, 8, false, false, 80, 60},
      {PngColorType::kGrayAlpha, 16, false, true, 70, 90},
      {PngColorType::kPalette, 4, true, false, 64, 64},
      {PngColorType::kRgb, 16, false, true, 100, 50},
      {PngColorType::kGray, 1, false, false, 50, 75},
      {PngColorType::kRgb, 8, true, false, 61, 47},
      {PngColorType::kRgbAlpha, 16, false, true, 45, 45},
  };
  std::vector<PngSpec> specs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    PngSpec s;
    s.color_type = shapes[i].type;
    s.bit_depth = shapes[i].depth;
    s.interlaced = shapes[i].interlaced;
    s.width = shapes[i].width;
    s.height = shapes[i].height;
    testing::FillRandom(&s, static_cast<uint32_t>(100 + i), shapes[i].trns);
    specs.push_back(std::move(s));
  }
  return specs;
}

// Writes each image as a record (label = its index) and returns each record's offset.
// image/format says JPEG (EncodeImageExample's default): the decoder goes by the signature.
std::vector<uint64_t> WriteShard(const std::string& path, const std::vector<std::string>& images) {
  return testing::WriteImageShard(path, images, "x.png");
}

TEST_CASE("PngRecordsBatchAsTheirPixelsRenderedByThePlanUnderEveryModeAndAlpha") {
  TempDir dir;
  const std::vector<PngSpec> specs = MixedPngs();
  std::vector<std::string> pngs;
  for (const PngSpec& s : specs) pngs.push_back(testing::WritePngWithLibpng(s));
  WriteShard(dir.file("shard-0.tfrecord"), pngs);

  for (const ModeAndAlpha& c : EveryModeAndAlpha()) {
    INFO("mode " << v1::Mode_Name(c.mode) << ", " << v1::Alpha_Name(c.alpha));
    const v1::PipelineOptions o = testing::InOrderAs(dir, c);
    StatsSnapshot stats;
    const testing::Collected got = testing::RunOneEpochInOrder(o, specs.size(), &stats);
    CHECK(stats.png_decodes == specs.size());
    CHECK(stats.jpeg_decodes == 0);

    // The same plan (same random draws) rendered from the pixels the PNG holds.
    testing::CheckEveryImageRenderedByThePlan(got, o, specs.size(), [&](size_t k) {
      const PngSpec& s = specs[k];
      return testing::ExpectedImage{testing::ExpectedRgb(s, c.expected_alpha), s.width, s.height};
    });
  }
}

TEST_CASE("PngsAndJpegsShareAShardAndTheDecodedCacheDecodesEachPngOnce") {
  TempDir dir;
  std::vector<std::string> images;
  const std::vector<PngSpec> specs = MixedPngs();
  for (size_t i = 0; i < 12; ++i) {
    images.push_back(i % 2 == 0 ? testing::WritePngWithLibpng(specs[i / 2 % specs.size()])
                                : testing::IdJpeg(static_cast<int>(i)));
  }
  WriteShard(dir.file("shard-0.tfrecord"), images);
  v1::PipelineOptions o = BaseOptions(dir);
  o.set_epochs(3);
  o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  StatsSnapshot stats;
  const testing::Collected got = RunToEnd(o, &stats);
  REQUIRE(got.status.ok());
  REQUIRE(got.labels_by_epoch.size() == 3);
  for (const auto& labels : got.labels_by_epoch) CHECK(Sorted(labels) == Iota(12));
  CHECK(stats.png_decodes == 6);
  CHECK(stats.jpeg_decodes == 6);
  CHECK(stats.cache_entries == 12);
  CHECK(got.skipped == 0);
}

TEST_CASE("DamagedPngRecordIsSkippedOrFailsNamingFileAndOffset") {
  TempDir dir;
  const std::vector<PngSpec> specs = MixedPngs();
  std::vector<std::string> images;
  for (int i = 0; i < 5; ++i) images.push_back(testing::WritePngWithLibpng(specs[i]));
  const std::string cut = images[2].substr(0, images[2].size() / 2);
  images[2] = cut;
  images.push_back("GIF89a and more");
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  const std::string at = path + ":";
  testing::CheckDamageIsSkippedOrFails(
      dir, {0, 1, 3, 4},
      {at + std::to_string(offsets[2]) + ": PNG data ends at byte " + std::to_string(cut.size()),
       at + std::to_string(offsets[5]) + ": GIF image, not JPEG, PNG or WebP"},
      at + std::to_string(offsets[2]) + ": ");
}

// A 3000x3000 PNG (27 MB of pixels) is over the ~10 MB decode share of a 64 MiB budget: refused
// from its header, before libpng or the pixels take anything; the small ones decode within it.
TEST_CASE("PngOverTheDecodeShareIsRefusedFromItsHeader") {
  TempDir dir;
  const std::vector<PngSpec> specs = MixedPngs();
  std::vector<std::string> images;
  for (const PngSpec& s : specs) images.push_back(testing::WritePngWithLibpng(s));
  PngSpec large;
  large.width = 3000;
  large.height = 3000;
  large.samples.assign(size_t{3000} * 3000 * 3, 128);
  images.push_back(testing::WritePngWithLibpng(large));
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  StatsSnapshot stats;
  const testing::Collected got = testing::RunInOrderUnderBudget(dir, 64 << 20, &stats);
  REQUIRE(got.status.ok());
  CHECK(got.labels_by_epoch[0] == Iota(static_cast<int>(specs.size())));
  CHECK(got.skipped == 1);
  REQUIRE(stats.recent_errors.size() == 1);
  CHECK(stats.recent_errors[0].find(path + ":" + std::to_string(offsets.back()) +
                                    ": decoding it needs an estimated 27") != std::string::npos);
  CheckDecodePoolHeldUnderItsLimit(stats);
}

}  // namespace
}  // namespace sluice

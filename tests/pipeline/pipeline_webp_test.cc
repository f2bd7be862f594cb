// WebP records through the whole pipeline: told from JPEG and PNG by their RIFF header, decoded
// whole within the decode budget, cropped and resized as the plan says, their alpha per
// PipelineOptions.alpha, and their damage (a cut file, an animation) skipped or failed naming
// file and offset.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/seed.h"
#include "formats/tfrecord_reader.h"
#include "formats/webp_codec.h"
#include "pipeline/geometry_plan.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/webp_test_images.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::EncodeWebp;
using testing::Iota;
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

// The RGB a still decodes to under alpha.
std::vector<uint8_t> ExpectedRgb(const Still& s, Alpha alpha) {
  std::vector<uint8_t> rgb(static_cast<size_t>(s.width) * s.height * 3);
  FlattenRgba(s.rgba.data(), static_cast<size_t>(s.width) * s.height,
              s.channels == 4 ? alpha : Alpha::kDrop, rgb.data());
  return rgb;
}

// Writes each image as a record (label = its index) and returns each record's offset.
std::vector<uint64_t> WriteShard(const std::string& path, const std::vector<std::string>& images) {
  auto writer = TFRecordWriter::Create(path);
  REQUIRE(writer.ok());
  for (size_t i = 0; i < images.size(); ++i) {
    ImageRecord r{images[i], static_cast<int64_t>(i), "c", 0, 0, "x.webp", "WEBP"};
    REQUIRE((*writer)->Write(EncodeImageExample(r)).ok());
  }
  std::vector<uint64_t> offsets;
  for (const IndexEntry& e : (*writer)->index()) offsets.push_back(e.offset);
  REQUIRE((*writer)->Close().ok());
  return offsets;
}

v1::PipelineOptions InOrder(const TempDir& dir) {
  v1::PipelineOptions o = BaseOptions(dir);
  o.mutable_shuffle()->set_buffer_size(0);
  o.set_no_shuffle_files(true);
  return o;
}

TEST_CASE("WebpRecordsBatchAsTheirPixelsRenderedByThePlanUnderEveryModeAndAlpha") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  std::vector<std::string> images;
  for (const Still& s : stills) images.push_back(s.webp);
  WriteShard(dir.file("shard-0.tfrecord"), images);

  struct Case {
    v1::Mode mode;
    v1::Alpha alpha;
    Alpha expected_alpha;
  };
  for (const Case& c : {Case{v1::MODE_EVAL, v1::ALPHA_DROP, Alpha::kDrop},
                        Case{v1::MODE_EVAL, v1::ALPHA_COMPOSITE_WHITE, Alpha::kCompositeWhite},
                        Case{v1::MODE_TRAIN, v1::ALPHA_COMPOSITE_BLACK, Alpha::kCompositeBlack},
                        Case{v1::MODE_TRAIN, v1::ALPHA_DROP, Alpha::kDrop}}) {
    INFO("mode " << v1::Mode_Name(c.mode) << ", " << v1::Alpha_Name(c.alpha));
    v1::PipelineOptions o = InOrder(dir);
    o.set_mode(c.mode);
    o.set_alpha(c.alpha);
    StatsSnapshot stats;
    const testing::Collected got = RunToEnd(o, &stats);
    REQUIRE(got.status.ok());
    REQUIRE(got.labels_by_epoch.size() == 1);
    REQUIRE(got.labels_by_epoch[0] == Iota(static_cast<int>(stills.size())));
    CHECK(stats.webp_decodes == stills.size());
    CHECK(stats.png_decodes == 0);
    CHECK(stats.jpeg_decodes == 0);

    // The same plan (same random draws) rendered from the pixels the WebP holds.
    Result<ResolvedOptions> r = ResolveOptions(o);
    REQUIRE(r.ok());
    REQUIRE(r->transforms.writes_slot_directly());
    const size_t image_bytes = r->image_bytes();
    REQUIRE(got.image_bytes.size() == image_bytes * stills.size());
    for (size_t k = 0; k < stills.size(); ++k) {
      INFO("image " << k);
      const Still& s = stills[k];
      const std::vector<uint8_t> rgb = ExpectedRgb(s, c.expected_alpha);
      AugmentRng rng(MixSeed(r->seed, 0), k);
      const GeometryPlan plan =
          PlanGeometry(r->transforms.geometry, s.width, s.height, r->width, r->height, rng);
      std::vector<uint8_t> expected(image_bytes);
      RenderGeometry(ImageView{rgb.data(), s.width, s.height, static_cast<size_t>(s.width) * 3},
                     plan, r->width, r->height, expected.data());
      CHECK(got.image_bytes.substr(k * image_bytes, image_bytes) ==
            std::string(expected.begin(), expected.end()));
    }
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

  for (bool cached : {false, true}) {
    INFO((cached ? "DECODED cache" : "no cache"));
    v1::PipelineOptions o = InOrder(dir);
    if (cached) o.mutable_cache()->set_mode(v1::CACHE_DECODED);
    StatsSnapshot stats;
    const testing::Collected skip = RunToEnd(o, &stats);
    REQUIRE(skip.status.ok());
    CHECK(skip.labels_by_epoch[0] == std::vector<int32_t>{0, 2, 3});
    CHECK(stats.skipped == 2);
    std::string errors;
    for (const std::string& e : stats.recent_errors) errors += e + "\n";
    INFO(errors);
    CHECK(errors.find(path + ":" + std::to_string(offsets[1]) + ": WebP data ends at byte " +
                      std::to_string(cut.size())) != std::string::npos);
    CHECK(errors.find(path + ":" + std::to_string(offsets[4]) +
                      ": animated WebP (12x10 canvas) is not decoded") != std::string::npos);

    o.set_error_policy(v1::ERROR_POLICY_FAIL);
    const testing::Collected fail = RunToEnd(o);
    CHECK(fail.status.code() == StatusCode::kDataLoss);
    CHECK(fail.status.message().find(path + ":" + std::to_string(offsets[1]) + ": ") == 0);
  }
}

// A 3000x3000 WebP (27 MB of pixels) is over the ~10 MB decode share of a 64 MiB budget: refused
// from its header, before libwebp or the pixels take anything; the small ones decode within it.
TEST_CASE("WebpOverTheDecodeShareIsRefusedFromItsHeader") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  std::vector<std::string> images;
  for (const Still& s : stills) images.push_back(s.webp);
  const std::vector<uint8_t> flat(size_t{3000} * 3000 * 4, 128);
  images.push_back(EncodeWebp(flat.data(), 3000, 3000, 3, WebpCodec::kLossy));
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  v1::PipelineOptions o = InOrder(dir);
  o.set_memory_budget_bytes(64 << 20);
  StatsSnapshot stats;
  const testing::Collected got = RunToEnd(o, &stats, /*keep_images=*/false);
  REQUIRE(got.status.ok());
  CHECK(got.labels_by_epoch[0] == Iota(static_cast<int>(stills.size())));
  CHECK(got.skipped == 1);
  REQUIRE(stats.recent_errors.size() == 1);
  CHECK(stats.recent_errors[0].find(path + ":" + std::to_string(offsets.back()) +
                                    ": decoding it needs an estimated 29") != std::string::npos);
  CHECK(stats.webp_decodes == stills.size() + 1);  // counted as its decode starts, as a PNG's
  bool seen = false;
  for (const auto& p : stats.pools) {
    if (p.name != "decode") continue;
    seen = true;
    CHECK(p.limit_bytes < int64_t{3000} * 3000 * 3);
    CHECK(p.peak_bytes > 0);
    CHECK(p.peak_bytes <= p.limit_bytes);
    CHECK(p.bytes == 0);
  }
  CHECK(seen);
}

// A 256x256 lossless WebP whose entropy image names 4096 Huffman groups makes libwebp allocate
// 85 MB of tables before a pixel (51 MB without a colour cache, as a lossy image's alpha): over
// the ~10 MB decode share of a 64 MiB budget, refused from its header like a large image.
TEST_CASE("WebpWhoseHuffmanTablesExceedTheDecodeShareIsRefusedFromItsHeader") {
  TempDir dir;
  const std::vector<Still> stills = MixedWebps();
  std::vector<std::string> images;
  for (const Still& s : stills) images.push_back(s.webp);
  images.push_back(testing::ManyGroupsWebp(256, 256, 11, 4096, false));
  images.push_back(testing::ManyGroupsWebp(256, 256, 0, 4096, true));
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<uint64_t> offsets = WriteShard(path, images);

  v1::PipelineOptions o = InOrder(dir);
  o.set_memory_budget_bytes(64 << 20);
  StatsSnapshot stats;
  const testing::Collected got = RunToEnd(o, &stats, /*keep_images=*/false);
  REQUIRE(got.status.ok());
  CHECK(got.labels_by_epoch[0] == Iota(static_cast<int>(stills.size())));
  CHECK(got.skipped == 2);
  std::string errors;
  for (const std::string& e : stats.recent_errors) errors += e + "\n";
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

// Helpers of the pipeline tests of the still-image formats (pipeline_png_test.cc,
// pipeline_webp_test.cc): a shard of such images read in order, the batch pixels each image's plan
// renders, and what the pipeline's errors and decode pool show.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/seed.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/geometry_plan.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice::testing {

// Writes each image as a record (label = its index; image/filename and image/format as given) and
// returns each record's offset.
inline std::vector<uint64_t> WriteImageShard(const std::string& path,
                                             const std::vector<std::string>& images,
                                             std::string_view filename,
                                             std::string_view format = "JPEG") {
  auto writer = TFRecordWriter::Create(path);
  REQUIRE(writer.ok());
  for (size_t i = 0; i < images.size(); ++i) {
    ImageRecord r{images[i], static_cast<int64_t>(i), "c", 0, 0, filename, format};
    REQUIRE((*writer)->Write(EncodeImageExample(r)).ok());
  }
  std::vector<uint64_t> offsets;
  for (const IndexEntry& e : (*writer)->index()) offsets.push_back(e.offset);
  REQUIRE((*writer)->Close().ok());
  return offsets;
}

// BaseOptions with the records in file order: no shuffle buffer, files not shuffled.
inline v1::PipelineOptions InOrder(const TempDir& dir) {
  v1::PipelineOptions o = BaseOptions(dir);
  o.mutable_shuffle()->set_buffer_size(0);
  o.set_no_shuffle_files(true);
  return o;
}

// The shard in order under memory_budget_bytes, the images not kept (labels and stats only).
inline Collected RunInOrderUnderBudget(const TempDir& dir, int64_t memory_budget_bytes,
                                       StatsSnapshot* stats) {
  v1::PipelineOptions o = InOrder(dir);
  o.set_memory_budget_bytes(memory_budget_bytes);
  return RunToEnd(o, stats, /*keep_images=*/false);
}

// Every mode under each alpha policy, and the Alpha the decoder is expected to apply.
struct ModeAndAlpha {
  v1::Mode mode;
  v1::Alpha alpha;
  Alpha expected_alpha;
};
inline std::vector<ModeAndAlpha> EveryModeAndAlpha() {
  return {{v1::MODE_EVAL, v1::ALPHA_DROP, Alpha::kDrop},
          {v1::MODE_EVAL, v1::ALPHA_COMPOSITE_WHITE, Alpha::kCompositeWhite},
          {v1::MODE_TRAIN, v1::ALPHA_COMPOSITE_BLACK, Alpha::kCompositeBlack},
          {v1::MODE_TRAIN, v1::ALPHA_DROP, Alpha::kDrop}};
}

// Checks that image k of got (one epoch, in order) is rgb (width x height, the pixels the record
// holds) rendered by the same plan (same random draws) the pipeline made for it under r.
inline void CheckRenderedByPlan(const Collected& got, const ResolvedOptions& r, size_t k,
                                const std::vector<uint8_t>& rgb, int width, int height) {
  const size_t image_bytes = r.image_bytes();
  AugmentRng rng(MixSeed(r.seed, 0), k);
  const GeometryPlan plan =
      PlanGeometry(r.transforms.geometry, width, height, r.width, r.height, rng);
  std::vector<uint8_t> expected(image_bytes);
  RenderGeometry(ImageView{rgb.data(), width, height, static_cast<size_t>(width) * 3}, plan,
                 r.width, r.height, expected.data());
  CHECK(got.image_bytes.substr(k * image_bytes, image_bytes) ==
        std::string(expected.begin(), expected.end()));
}

// The errors the pipeline kept (StatsSnapshot::recent_errors), one a line.
inline std::string RecentErrors(const StatsSnapshot& stats) {
  std::string errors;
  for (const std::string& e : stats.recent_errors) errors += e + "\n";
  return errors;
}

// Checks the decode pool: its limit under a 3000x3000 RGB image, used within it, empty at the end.
inline void CheckDecodePoolHeldUnderItsLimit(const StatsSnapshot& stats) {
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

}  // namespace sluice::testing

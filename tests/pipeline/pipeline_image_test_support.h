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

// BaseOptions in order (InOrder) under c's mode and alpha policy.
inline v1::PipelineOptions InOrderAs(const TempDir& dir, const ModeAndAlpha& c) {
  v1::PipelineOptions o = InOrder(dir);
  o.set_mode(c.mode);
  o.set_alpha(c.alpha);
  return o;
}

// Runs o to its end and requires one epoch of all count records of the shard, in order.
inline Collected RunOneEpochInOrder(const v1::PipelineOptions& o, size_t count,
                                    StatsSnapshot* stats) {
  Collected got = RunToEnd(o, stats);
  REQUIRE(got.status.ok());
  REQUIRE(got.labels_by_epoch.size() == 1);
  REQUIRE(got.labels_by_epoch[0] == Iota(static_cast<int>(count)));
  return got;
}

// The pixels a record holds, decoded: RGB, width x height.
struct ExpectedImage {
  std::vector<uint8_t> rgb;
  int width = 0;
  int height = 0;
};

// Checks that got, one epoch of count images in order run under o, holds each image k's pixels,
// expected(k), rendered by the same plan (same random draws) the pipeline made for it.
template <typename Expected>
void CheckEveryImageRenderedByThePlan(const Collected& got, const v1::PipelineOptions& o,
                                      size_t count, Expected expected) {
  Result<ResolvedOptions> r = ResolveOptions(o);
  REQUIRE(r.ok());
  REQUIRE(r->transforms.writes_slot_directly());
  const size_t image_bytes = r->image_bytes();
  REQUIRE(got.image_bytes.size() == image_bytes * count);
  for (size_t k = 0; k < count; ++k) {
    INFO("image " << k);
    const ExpectedImage image = expected(k);
    AugmentRng rng(MixSeed(r->seed, 0), k);
    const GeometryPlan plan =
        PlanGeometry(r->transforms.geometry, image.width, image.height, r->width, r->height, rng);
    std::vector<uint8_t> rendered(image_bytes);
    RenderGeometry(ImageView{image.rgb.data(), image.width, image.height,
                             static_cast<size_t>(image.width) * 3},
                   plan, r->width, r->height, rendered.data());
    CHECK(got.image_bytes.substr(k * image_bytes, image_bytes) ==
          std::string(rendered.begin(), rendered.end()));
  }
}

// The errors the pipeline kept (StatsSnapshot::recent_errors), one a line.
inline std::string RecentErrors(const StatsSnapshot& stats) {
  std::string errors;
  for (const std::string& e : stats.recent_errors) errors += e + "\n";
  return errors;
}

// Checks a shard with damaged records, read in order without a cache and with the DECODED cache:
// under the skip policy the batches hold the labels `kept`, one record is skipped per expected
// error and each of `errors` is among the errors kept; under ERROR_POLICY_FAIL the run fails
// with DataLoss, its message starting with `fail_prefix` (the first damaged record's file:offset).
inline void CheckDamageIsSkippedOrFails(const TempDir& dir, const std::vector<int32_t>& kept,
                                        const std::vector<std::string>& errors_expected,
                                        const std::string& fail_prefix) {
  for (bool cached : {false, true}) {
    INFO((cached ? "DECODED cache" : "no cache"));
    v1::PipelineOptions o = InOrder(dir);
    if (cached) o.mutable_cache()->set_mode(v1::CACHE_DECODED);
    StatsSnapshot stats;
    const Collected skip = RunToEnd(o, &stats);
    REQUIRE(skip.status.ok());
    CHECK(skip.labels_by_epoch[0] == kept);
    CHECK(stats.skipped == errors_expected.size());
    const std::string errors = RecentErrors(stats);
    INFO(errors);
    for (const std::string& e : errors_expected) CHECK(errors.find(e) != std::string::npos);

    o.set_error_policy(v1::ERROR_POLICY_FAIL);
    const Collected fail = RunToEnd(o);
    CHECK(fail.status.code() == StatusCode::kDataLoss);
    CHECK(fail.status.message().find(fail_prefix) == 0);
  }
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

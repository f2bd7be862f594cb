// Whole pipelines with transform lists (issue 16): output dtypes and layouts hold what the uint8
// recipe holds, converted; random ops are the same bytes at any thread count and cache; mixup and
// cutmix mix each batch with itself rolled by one; padding crops leave zeros.
#include <google/protobuf/text_format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "formats/pixel_ops.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::RunToEnd;
using testing::TempDir;
using testing::WriteTestShards;

v1::PipelineOptions WithTransforms(const TempDir& dir, const std::string& text) {
  v1::PipelineOptions o = BaseOptions(dir);
  REQUIRE(google::protobuf::TextFormat::MergeFromString(text, &o));
  return o;
}

struct MixedBatch {
  std::vector<int32_t> labels, mixed;
  std::vector<float> weights;
  std::string images;
};

std::vector<MixedBatch> Batches(const v1::PipelineOptions& o) {
  auto it = testing::StartIterator(o);
  std::vector<MixedBatch> out;
  for (;;) {
    Batch b;
    bool end = false;
    REQUIRE((*it).GetNext(&b, &end).ok());
    if (end) break;
    MixedBatch m;
    m.labels.assign(b.labels().begin(), b.labels().end());
    m.mixed.assign(b.mixed_labels().begin(), b.mixed_labels().end());
    m.weights.assign(b.label_weights().begin(), b.label_weights().end());
    m.images.assign(reinterpret_cast<const char*>(b.images().data()), b.images().size());
    out.push_back(std::move(m));
  }
  return out;
}

// The batches of 16 records with the train preset alone, and with `mix` (a batch op) after it.
std::pair<std::vector<MixedBatch>, std::vector<MixedBatch>> PlainAndMixed(const std::string& mix) {
  TempDir dir;
  WriteTestShards(dir, 1, 16, 72, 56, /*noisy=*/true);
  auto plain = BaseOptions(dir);
  plain.set_num_classes(100);
  auto mixed = plain;
  REQUIRE(google::protobuf::TextFormat::MergeFromString(
      "transforms { preset: PRESET_IMAGENET_TRAIN } " + mix, &mixed));
  return {Batches(plain), Batches(mixed)};
}

TEST_CASE("Bf16NchwNormalizedHoldsTheUint8RecipeConverted") {
  TempDir dir;
  WriteTestShards(dir, 2, 10, 72, 56, /*noisy=*/true);
  const auto plain = RunToEnd(BaseOptions(dir));
  REQUIRE(plain.status.ok());
  const auto bf16 = RunToEnd(WithTransforms(dir, R"(
    transforms { preset: PRESET_IMAGENET_TRAIN }
    transforms { normalize { mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] } }
    transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } })"));
  REQUIRE(bf16.status.ok());
  CHECK(bf16.labels_by_epoch == plain.labels_by_epoch);
  const int h = 32, w = 40;
  const size_t n = plain.image_bytes.size() / (h * w * 3);
  REQUIRE(bf16.image_bytes.size() == plain.image_bytes.size() * 2);
  const double mean[3] = {0.485, 0.456, 0.406}, stddev[3] = {0.229, 0.224, 0.225};
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          const uint8_t u = static_cast<uint8_t>(plain.image_bytes[((i * h + y) * w + x) * 3 + c]);
          uint16_t bits;
          std::memcpy(&bits, bf16.image_bytes.data() + (((i * 3 + c) * h + y) * w + x) * 2, 2);
          const double want = (u / 255.0 - mean[c]) / stddev[c];
          worst = std::max(worst,
                           std::abs(BFloat16ToFloat(bits) - want) / std::max(1.0, std::abs(want)));
        }
      }
    }
  }
  CHECK(worst <= 1.0 / 128);  // bfloat16 keeps 8 significant bits
}

TEST_CASE("RandomOpsAreTheSameBytesAtOneAndTwoThreadsAndWithTheDecodedCache") {
  TempDir dir;
  WriteTestShards(dir, 2, 12, 72, 56, /*noisy=*/true);
  const std::string list = R"(
    transforms { random_resized_crop { scale: [0.3, 1] interpolation: INTERPOLATION_BICUBIC } }
    transforms { flip { horizontal_p: 0.5 vertical_p: 0.5 } }
    transforms { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 hue: 0.1 } }
    transforms { grayscale { p: 0.2 } }
    transforms { gaussian_blur { kernel_size: 3 p: 0.5 } }
    transforms { rotate { degrees: 20 p: 0.5 } }
    transforms { trivial_augment_wide {} }
    transforms { rand_augment {} }
    transforms { output { dtype: DTYPE_FLOAT16 } })";
  auto o = WithTransforms(dir, list);
  o.set_epochs(2);
  o.set_threads(1);
  const auto one = RunToEnd(o);
  REQUIRE(one.status.ok());
  o.set_threads(2);
  const auto two = RunToEnd(o);
  REQUIRE(two.status.ok());
  CHECK(one.image_bytes == two.image_bytes);
  // The cache holds decoded images before every random op: each epoch still draws anew.
  o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  const auto cached = RunToEnd(o);
  REQUIRE(cached.status.ok());
  const size_t half = cached.image_bytes.size() / 2;
  CHECK(cached.image_bytes.substr(0, half) != cached.image_bytes.substr(half));
  CHECK(cached.labels_by_epoch[0] != cached.labels_by_epoch[1]);
}

TEST_CASE("AColorJitterAloneRunsFusedAndWritesTheBytesOfTheOpsInSequence") {
  // A list whose only per-pixel op is one color_jitter takes the fused path (JitterAndWrite); a
  // grayscale that never applies (p 0, no draw) puts the same list on the sequential path.
  TempDir dir;
  WriteTestShards(dir, 2, 10, 72, 56, /*noisy=*/true);
  const std::string outputs[] = {
      "transforms { normalize { mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] } }\n"
      "transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } }",
      "transforms { output { dtype: DTYPE_FLOAT32 } }",
      "",
  };
  const std::string jitters[] = {
      "transforms { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 } }",
      "transforms { color_jitter { brightness: 0.8 contrast: 0.9 saturation: 0.5 hue: 0.3 } }",
      "transforms { color_jitter { contrast: [0.2, 1.8] p: 0.5 } }",
  };
  for (const std::string& output : outputs) {
    for (const std::string& jitter : jitters) {
      INFO(jitter << "\n" << output);
      const std::string geometry = "transforms { preset: PRESET_IMAGENET_TRAIN }\n";
      const auto fused = RunToEnd(WithTransforms(dir, geometry + jitter + "\n" + output));
      const auto sequential = RunToEnd(WithTransforms(
          dir, geometry + jitter + "\ntransforms { grayscale { p: 0 } }\n" + output));
      REQUIRE(fused.status.ok());
      REQUIRE(sequential.status.ok());
      CHECK(fused.labels_by_epoch == sequential.labels_by_epoch);
      CHECK(fused.image_bytes == sequential.image_bytes);
    }
  }
}

TEST_CASE("MixupBlendsEachSampleWithThePreviousOneAndSaysSo") {
  const auto [plain, mixed] = PlainAndMixed("transforms { mixup { alpha: 0.4 } }");
  REQUIRE(plain.size() == mixed.size());
  const size_t image = 32 * 40 * 3;
  for (size_t b = 0; b < plain.size(); ++b) {
    const size_t n = plain[b].labels.size();
    REQUIRE(mixed[b].mixed.size() == n);
    REQUIRE(mixed[b].weights.size() == n);
    const float lambda = mixed[b].weights[0];
    CHECK(lambda >= 0);
    CHECK(lambda <= 1);
    for (size_t i = 0; i < n; ++i) {
      const size_t prev = (i + n - 1) % n;
      CHECK(mixed[b].labels[i] == plain[b].labels[i]);
      CHECK(mixed[b].mixed[i] == plain[b].labels[prev]);
      CHECK(mixed[b].weights[i] == lambda);
      int worst = 0;
      for (size_t k = 0; k < image; ++k) {
        const double want = lambda * static_cast<uint8_t>(plain[b].images[i * image + k]) +
                            (1 - lambda) * static_cast<uint8_t>(plain[b].images[prev * image + k]);
        worst = std::max(
            worst,
            static_cast<int>(std::abs(static_cast<uint8_t>(mixed[b].images[i * image + k]) - want) +
                             0.5));
      }
      CHECK(worst <= 1);
    }
  }
}

TEST_CASE("CutmixPastesABoxOfThePreviousSampleAndWeighsWhatItLeaves") {
  const auto [plain, mixed] = PlainAndMixed("transforms { cutmix {} }");
  REQUIRE(plain.size() == mixed.size());
  const int h = 32, w = 40;
  const size_t image = h * w * 3;
  int boxes = 0;
  for (size_t b = 0; b < plain.size(); ++b) {
    const size_t n = plain[b].labels.size();
    if (n < 2) continue;
    // Pixels from the previous sample: count them in sample 1 (sample 0 mixes with the last).
    int from_prev = 0;
    for (int p = 0; p < h * w; ++p) {
      const bool own =
          std::memcmp(&mixed[b].images[image + p * 3], &plain[b].images[image + p * 3], 3) == 0;
      const bool prev =
          std::memcmp(&mixed[b].images[image + p * 3], &plain[b].images[p * 3], 3) == 0;
      REQUIRE((own || prev));
      if (!own) ++from_prev;
    }
    // Pixels equal in both samples are counted as own: the box holds at least from_prev.
    CHECK(1.0 - mixed[b].weights[1] >= static_cast<double>(from_prev) / (h * w) - 1e-6);
    CHECK(mixed[b].mixed[1] == plain[b].labels[0]);
    boxes += from_prev > 0 ? 1 : 0;
  }
  CHECK(boxes > 0);
}

TEST_CASE("RandomCropWithPaddingLeavesZeroBorders") {
  TempDir dir;
  // Images exactly the output size: every pixel outside the drawn window is padding.
  WriteTestShards(dir, 1, 8, 40, 32, /*noisy=*/true);
  const auto c = RunToEnd(WithTransforms(dir, "transforms { random_crop { padding: 6 } }"));
  REQUIRE(c.status.ok());
  const size_t image = 32 * 40 * 3;
  int images_with_zero_rows = 0;
  for (size_t i = 0; i * image < c.image_bytes.size(); ++i) {
    bool zero_edge = true;
    for (size_t k = 0; k < 40 * 3; ++k) zero_edge &= c.image_bytes[i * image + k] == 0;
    bool zero_bottom = true;
    for (size_t k = 0; k < 40 * 3; ++k)
      zero_bottom &= c.image_bytes[i * image + image - 1 - k] == 0;
    images_with_zero_rows += (zero_edge || zero_bottom) ? 1 : 0;
  }
  // A window shifted vertically leaves a zero top or bottom row; 13 offsets of which 1 is not.
  CHECK(images_with_zero_rows >= 4);
}

TEST_CASE("TheDecodedCacheIsRefusedUnderACropOfAbsoluteSize") {
  TempDir dir;
  WriteTestShards(dir, 1, 4);
  auto o = WithTransforms(dir,
                          "transforms { random_crop { padding: 4 } } "
                          "cache { mode: CACHE_DECODED }");
  auto p = Pipeline::Create(o);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.status().message(), Catch::Contains("cache.mode: CACHE_DECODED keeps images"));
  o.mutable_cache()->set_mode(v1::CACHE_RECORDS);
  CHECK(Pipeline::Create(o).ok());
}

TEST_CASE("ABadTransformListFailsPipelineCreationNamingTheField") {
  TempDir dir;
  WriteTestShards(dir, 1, 4);
  auto o = WithTransforms(dir,
                          "transforms { preset: PRESET_IMAGENET_TRAIN } "
                          "transforms { color_jitter { saturation: -2 } }");
  auto p = Pipeline::Create(o);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.status().message(), Catch::Contains("transforms[1].color_jitter.saturation"));
}

}  // namespace
}  // namespace sluice

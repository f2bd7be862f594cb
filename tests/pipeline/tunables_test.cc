#include "pipeline/tunables.h"

#include <catch2/catch.hpp>

#include "pipeline/options.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST_CASE("EveryTunableHasItsDefaultWithinItsBounds") {
  REQUIRE(Tunables().size() == static_cast<size_t>(Tunable::kCount));
  for (const TunableSpec& s : Tunables()) {
    INFO(s.field);
    CHECK(&Spec(s.id) == &s);
    CHECK(s.min <= s.max);
    // 0: computed by ResolveOptions from other options or the machine.
    if (s.default_value != 0 || s.min > 0) {
      CHECK((s.default_value == 0 || (s.default_value >= s.min && s.default_value <= s.max)));
    }
  }
}

TEST_CASE("UnsetMeansDefaultOnlyWhereZeroIsOutOfBounds") {
  CHECK(ValueOrDefault(Tunable::kBatchSize, 0) == 256);
  CHECK(ValueOrDefault(Tunable::kBatchSize, -3) == 256);
  CHECK(ValueOrDefault(Tunable::kBatchSize, 7) == 7);
  CHECK(ValueOrDefault(Tunable::kEpochs, 0) == 0);
  CHECK(ValueOrDefault(Tunable::kShuffleBuffer, -1) == -1);  // refused by CheckTunable
  CHECK(ValueOrDefault(Tunable::kThreads, 0, 5) == 5);
  CHECK(WidthOrHeight(0, 64) == 64);
  CHECK(WidthOrHeight(32, 64) == 32);
}

// ResolveOptions refuses each tunable just past either bound, naming the field and the table's
// bounds.
TEST_CASE("ResolveOptionsEnforcesTheTableAtEachBound") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  struct Case {
    Tunable tunable;
    void (*set)(v1::PipelineOptions&, int64_t);
  };
  const Case cases[] = {
      {Tunable::kCycleLength,
       [](auto& o, int64_t v) { o.mutable_interleave()->set_cycle_length(static_cast<int>(v)); }},
      {Tunable::kShuffleBuffer,
       [](auto& o, int64_t v) { o.mutable_shuffle()->set_buffer_size(v); }},
      {Tunable::kImageHeight, [](auto& o, int64_t v) { o.set_image_height(static_cast<int>(v)); }},
      {Tunable::kImageWidth, [](auto& o, int64_t v) { o.set_image_width(static_cast<int>(v)); }},
      {Tunable::kPrefetch, [](auto& o, int64_t v) { o.set_prefetch(static_cast<int>(v)); }},
      {Tunable::kEpochs, [](auto& o, int64_t v) { o.set_epochs(v); }},
      {Tunable::kMaxErrors, [](auto& o, int64_t v) { o.set_max_errors(v); }},
  };
  for (const Case& c : cases) {
    const TunableSpec& s = Spec(c.tunable);
    INFO(s.field);
    for (int64_t v : {s.min - 1, s.max + 1}) {
      if (s.min > 0 && v <= 0) continue;  // unset: takes the default
      v1::PipelineOptions o;
      o.add_files(dir.file("shard-*.tfrecord"));
      o.set_memory_budget_bytes(int64_t{1} << 40);  // room for the largest images
      c.set(o, v);
      Result<ResolvedOptions> r = ResolveOptions(o);
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == StatusCode::kInvalidArgument);
      CHECK(r.status().message() == std::string(s.field) + " = " + std::to_string(v) +
                                        " is outside [" + std::to_string(s.min) + ", " +
                                        std::to_string(s.max) + "]");
    }
  }
}

}  // namespace
}  // namespace sluice

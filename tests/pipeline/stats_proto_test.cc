#include "pipeline/stats_proto.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace sluice {
namespace {

// A snapshot with a distinct nonzero value in every member the wire carries.
StatsSnapshot Distinct() {
  StatsSnapshot s;
  s.wall_seconds = 2.5;
  s.batches = 3;
  s.images = 40;
  s.skipped = 5;
  s.index_fallbacks = 16;
  s.shuffle_capped = 17;
  s.dropped_records = 18;
  s.padded_samples = 19;
  s.boxes_dropped = 22;
  s.queue_fill = 6;
  s.queue_capacity = 7;
  s.decode_parallelism = 8;
  s.decode_parallelism_max = 9;
  s.stages.push_back({"decode", 10, 11, 1.25, 0.5, 0.75, 12});
  s.pools.push_back({"batch_pool", 13, 14, 0, 15});
  return s;
}

// The names of the fields of `m` that hold a value other than their default.
std::set<std::string> SetFields(const google::protobuf::Message& m) {
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  std::set<std::string> names;
  for (const auto* f : fields) names.insert(f->name());
  return names;
}

std::set<std::string> AllFields(const google::protobuf::Descriptor* d) {
  std::set<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.insert(d->field(i)->name());
  return names;
}

// A field added to StageStats or PoolStats without a line in stats_proto.cc's tables fails here.
TEST_CASE("EveryStageAndPoolFieldOfTheWireIsFilled") {
  v1::JobStats job;
  FillJobStats(Distinct(), &job);
  REQUIRE(job.stages_size() == 1);
  REQUIRE(job.pools_size() == 1);
  CHECK(SetFields(job.stages(0)) == AllFields(v1::StageStats::descriptor()));
  CHECK(SetFields(job.pools(0)) == AllFields(v1::PoolStats::descriptor()));
  std::set<std::string> job_fields = AllFields(v1::JobStats::descriptor());
  for (const char* owned_by_the_job :
       {"name", "dataset", "consumers", "memory_budget_bytes", "num_consumers", "start_epoch"}) {
    job_fields.erase(owned_by_the_job);
  }
  CHECK(SetFields(job) == job_fields);
  CHECK(job.images_per_sec() == Approx(16.0));
}

TEST_CASE("SnapshotRoundTripsThroughTheWire") {
  const StatsSnapshot s = Distinct();
  v1::JobStats job;
  FillJobStats(s, &job);
  const StatsSnapshot back = SnapshotFromJobStats(job);
  CHECK(back.wall_seconds == s.wall_seconds);
  CHECK(back.batches == s.batches);
  CHECK(back.images == s.images);
  CHECK(back.skipped == s.skipped);
  CHECK(back.index_fallbacks == s.index_fallbacks);
  CHECK(back.shuffle_capped == s.shuffle_capped);
  CHECK(back.dropped_records == s.dropped_records);
  CHECK(back.padded_samples == s.padded_samples);
  CHECK(back.boxes_dropped == s.boxes_dropped);
  CHECK(back.queue_fill == s.queue_fill);
  CHECK(back.queue_capacity == s.queue_capacity);
  CHECK(back.decode_parallelism == s.decode_parallelism);
  CHECK(back.decode_parallelism_max == s.decode_parallelism_max);
  REQUIRE(back.stages.size() == 1);
  const StageSnapshot& a = back.stages[0];
  const StageSnapshot& b = s.stages[0];
  CHECK(std::tie(a.name, a.items, a.bytes, a.busy_seconds, a.starved_seconds, a.blocked_seconds,
                 a.max_parallelism) == std::tie(b.name, b.items, b.bytes, b.busy_seconds,
                                                b.starved_seconds, b.blocked_seconds,
                                                b.max_parallelism));
  REQUIRE(back.pools.size() == 1);
  const PoolSnapshot& p = back.pools[0];
  CHECK(std::tie(p.name, p.bytes, p.peak_bytes, p.limit_bytes) ==
        std::tie(s.pools[0].name, s.pools[0].bytes, s.pools[0].peak_bytes, s.pools[0].limit_bytes));
  CHECK(p.items == 0);  // not on the wire
}

}  // namespace
}  // namespace sluice

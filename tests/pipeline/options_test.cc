#include "pipeline/options.h"

#include <catch2/catch.hpp>

#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST_CASE("DefaultsAreAppliedAndGlobsExpanded") {
  TempDir dir;
  testing::WriteTestShards(dir, 3, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.add_files(dir.file("shard-1.tfrecord"));  // duplicates collapse
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->files.size() == 3);
  CHECK(r->height == 224);
  CHECK(r->width == 224);
  CHECK(r->batch_size == 256);
  CHECK(r->image_key == "image/encoded");
  CHECK(r->label_key == "image/class/label");
  CHECK(r->cycle_length == 3);
  CHECK(r->threads >= 1);
  CHECK(r->decoded_short_side == 256);
  CHECK(r->error_policy == ErrorPolicy::kSkip);
  CHECK(r->mode == PipelineMode::kTrain);
  CHECK(r->skip_warn_percent == 10);
  CHECK(r->num_classes == 0);
}

// What the budget leaves after the batch pool and read buffers: a quarter for decoding, the rest
// for records, of which the largest record held may take half (the other half is the in-flight
// window it waits on), so records and decoders together stay within the budget.
TEST_CASE("MemoryBudgetSplitsIntoRecordsTheLargestRecordAndDecoding") {
  TempDir dir;
  testing::WriteTestShards(dir, 2, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.set_batch_size(8);
  o.set_image_height(32);
  o.set_image_width(40);
  o.set_memory_budget_bytes(64 << 20);
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  const int64_t rest = (64 << 20) - 8 * 32 * 40 * 3 * (2 + kBatchPoolExtra) -
                       2 * kReadBytesPerOpenFile;
  CHECK(r->decode_budget_bytes == rest / 4);
  CHECK(r->records_budget_bytes == rest - rest / 4);
  CHECK(r->max_held_record_bytes == r->records_budget_bytes / 2);
  CHECK(r->decode_budget_bytes + r->records_budget_bytes == rest);
  CHECK(r->shuffle_budget_bytes == 0);
  // With a shuffle buffer, a quarter is its byte share, as large as one record may be.
  o.mutable_shuffle()->set_buffer_size(16);
  r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->shuffle_budget_bytes == rest / 4);
  CHECK(r->records_budget_bytes == rest - 2 * (rest / 4));
  CHECK(r->max_held_record_bytes <= r->shuffle_budget_bytes);
}

// One 1024x1024 image per batch: with 32 MiB the batch pool and read buffers leave a decode share
// of ~3.3 MB, under the ~6.5 MB one decode of the output needs: every image would be refused.
TEST_CASE("DecodeShareUnderOneDecodeOfTheOutputIsRefusedNamingWhatToRaise") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.set_batch_size(1);
  o.set_image_height(1024);
  o.set_prefetch(1);
  o.set_memory_budget_bytes(32 << 20);
  auto r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(r.status().message(),
             Catch::Contains("memory_budget_bytes = 33554432 leaves ") &&
                 Catch::Contains(" bytes for decoding, under the 6553600 bytes one decode of a "
                                 "1024x1024 image needs; raise memory_budget_bytes by "));
  o.set_memory_budget_bytes(64 << 20);
  CHECK(ResolveOptions(o).ok());
}

TEST_CASE("BadValuesNameTheirField") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  struct Case {
    const char* field;
    std::function<void(v1::PipelineOptions&)> set;
  } cases[] = {
      {"batch_size", [](auto& o) { o.set_batch_size(100000); }},
      {"image_height", [](auto& o) { o.set_image_height(5000); }},
      {"shard.index", [](auto& o) { o.mutable_shard()->set_count(2), o.mutable_shard()->set_index(2); }},
      {"prefetch", [](auto& o) { o.set_prefetch(1000); }},
      {"interleave.cycle_length", [](auto& o) { o.mutable_interleave()->set_cycle_length(5000); }},
      {"skip_warn_percent", [](auto& o) { o.set_skip_warn_percent(101); }},
      {"num_classes", [](auto& o) { o.set_num_classes(-1); }},
  };
  for (const auto& c : cases) {
    v1::PipelineOptions o;
    o.add_files(dir.file("shard-*.tfrecord"));
    c.set(o);
    auto r = ResolveOptions(o);
    INFO(c.field);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(c.field) == 0);
  }
}

TEST_CASE("GlobMatchingNothingIsNotFound") {
  TempDir dir;
  v1::PipelineOptions o;
  o.add_files(dir.file("nothing-*.tfrecord"));
  auto r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK(r.status().message() == "no file matches '" + dir.file("nothing-*.tfrecord") + "'");
}

}  // namespace
}  // namespace sluice

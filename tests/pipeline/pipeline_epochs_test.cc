// Which records each epoch yields, in which order, pinned on real shards of real JPEGs:
// exactly-once, shuffling, determinism, sharding, remainders, finite epochs, eval mode, resuming.
#include <catch2/catch.hpp>
#include <filesystem>

#include "formats/record_index.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/pipeline.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::Iota;
using testing::RunToEnd;
using testing::Sorted;
using testing::TempDir;
using testing::WriteTestShards;

TEST_CASE("EveryRecordExactlyOncePerEpoch") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 5, 37);
  auto o = BaseOptions(dir);
  o.set_epochs(3);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  REQUIRE(c.labels_by_epoch.size() == 3);
  for (const auto& labels : c.labels_by_epoch) CHECK(Sorted(labels) == Iota(shards.records));
  // 185 records in batches of 8: 23 full and one of 1, per epoch, indexed from 0; end_record
  // counts the epoch's records up to each batch's last image.
  // The shuffle's byte share never bound (small records), so no position carries it: any share
  // resumes them exactly.
  CHECK(c.positions.size() == 3 * 24);
  CHECK(c.positions[0] == BatchPosition{0, 0, 8, 0});
  CHECK(c.positions[23] == BatchPosition{0, 23, 185, 0});
  CHECK(c.sizes[23] == 1);
  CHECK(c.positions[24] == BatchPosition{1, 0, 8, 0});
}

// The share that made an epoch's order travels in the position: a start position made under
// another share is refused naming both; one without a share (0) is taken as before.
TEST_CASE("StartPositionOfAnotherShuffleShareIsRefusedNamingBoth") {
  TempDir dir;
  WriteTestShards(dir, 2, 10);
  auto pipeline = Pipeline::Create(BaseOptions(dir));
  REQUIRE(pipeline.ok());
  const int64_t share = (*pipeline)->options().shuffle_budget_bytes;
  REQUIRE(share > 0);
  auto refused = (*pipeline)->MakeIterator(BatchPosition{0, 1, 8, share + 1});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("start_position.shuffle_bytes " + std::to_string(share + 1)) &&
                 Catch::Contains("shuffle share " + std::to_string(share) + " bytes") &&
                 Catch::Contains("or start the epoch over"));
  CHECK((*pipeline)->MakeIterator(BatchPosition{0, 1, 8, share}).ok());
  CHECK((*pipeline)->MakeIterator(BatchPosition{0, 1, 8, 0}).ok());
}

TEST_CASE("NewEpochHasNewOrder") {
  TempDir dir;
  WriteTestShards(dir, 3, 30);
  auto o = BaseOptions(dir);
  o.set_epochs(2);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.labels_by_epoch[0] != c.labels_by_epoch[1]);
  CHECK(Sorted(c.labels_by_epoch[0]) == Sorted(c.labels_by_epoch[1]));
}

TEST_CASE("SameSeedGivesIdenticalBytesAcrossThreadCounts") {
  TempDir dir;
  WriteTestShards(dir, 4, 25);
  auto o = BaseOptions(dir);
  o.set_epochs(2);
  o.set_threads(1);
  auto one = RunToEnd(o);
  o.set_threads(3);
  auto three = RunToEnd(o);
  REQUIRE(one.status.ok());
  REQUIRE(three.status.ok());
  CHECK(one.labels_by_epoch == three.labels_by_epoch);
  CHECK(one.image_bytes == three.image_bytes);
  o.set_seed(43);
  auto other = RunToEnd(o);
  CHECK(other.image_bytes != one.image_bytes);
}

TEST_CASE("ShardsPartitionTheData") {
  // 5 files over 3 shards: whole files per shard; 2 files over 3 shards: every 3rd record.
  for (int files : {5, 2}) {
    TempDir dir;
    auto shards = WriteTestShards(dir, files, 20);
    std::vector<int32_t> all;
    for (int index = 0; index < 3; ++index) {
      auto o = BaseOptions(dir);
      o.mutable_shard()->set_index(index);
      o.mutable_shard()->set_count(3);
      o.set_equal_shares(v1::EQUAL_SHARES_OFF);  // every record of the shard, none dropped
      auto c = RunToEnd(o);
      REQUIRE(c.status.ok());
      REQUIRE(c.labels_by_epoch.size() == 1);
      CHECK_FALSE(c.labels_by_epoch[0].empty());
      all.insert(all.end(), c.labels_by_epoch[0].begin(), c.labels_by_epoch[0].end());
    }
    INFO(files << " files");
    CHECK(Sorted(all) == Iota(shards.records));  // disjoint and complete
  }
}

TEST_CASE("DropRemainderDropsThePartialBatch") {
  TempDir dir;
  WriteTestShards(dir, 2, 21);
  auto o = BaseOptions(dir);
  o.set_drop_remainder(true);
  o.set_epochs(2);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.positions.size() == 2 * 5);
  for (int size : c.sizes) CHECK(size == 8);
}

TEST_CASE("FiniteEpochsEndWithEndOfSequenceEveryTime") {
  TempDir dir;
  WriteTestShards(dir, 1, 5);
  auto it = testing::StartIterator(BaseOptions(dir));
  Batch b;
  bool end = false;
  REQUIRE(it->GetNext(&b, &end).ok());
  CHECK_FALSE(end);
  CHECK(b.size() == 5);
  for (int i = 0; i < 3; ++i) {
    Batch again;
    REQUIRE(it->GetNext(&again, &end).ok());
    CHECK(end);
    CHECK_FALSE(again.valid());
  }
}

TEST_CASE("EvalModeIsTheSameEveryEpoch") {
  TempDir dir;
  WriteTestShards(dir, 2, 9);
  auto o = BaseOptions(dir);
  o.set_mode(v1::MODE_EVAL);
  o.set_epochs(2);
  o.mutable_shuffle()->set_buffer_size(0);
  o.set_no_shuffle_files(true);
  o.mutable_interleave()->set_cycle_length(1);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.labels_by_epoch[0] == Iota(18));
  size_t half = c.image_bytes.size() / 2;
  CHECK(c.image_bytes.substr(0, half) == c.image_bytes.substr(half));
}

uint64_t ReadBytes(const StatsSnapshot& s) {
  for (const auto& st : s.stages) {
    if (st.name == "read") return st.bytes;
  }
  return 0;
}

TEST_CASE("ResumingWithRecordIndexesReadsOnlyTheRecordsItUses") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 4, 100);
  // A record whose data is damaged (its frame and the index stay intact): skipped alike by the
  // whole run and by every resumed one, whether it was read or materialized from the index.
  {
    std::string bytes = testing::ReadAll(shards.paths[1]);
    const IndexEntry e = shards.index[1][60];
    bytes[e.offset + kTFRecordHeaderBytes + 20] ^= 0x10;
    testing::WriteAll(shards.paths[1], bytes);
  }
  auto o = BaseOptions(dir);
  StatsSnapshot full_stats;
  const auto full = RunToEnd(o, &full_stats);
  REQUIRE(full.status.ok());
  CHECK(full.skipped == 1);
  const size_t image_bytes = 32 * 40 * 3;
  std::vector<size_t> offsets{0};
  for (int size : full.sizes) offsets.push_back(offsets.back() + size * image_bytes);
  auto resume_after = [&](size_t k, StatsSnapshot* stats) {
    const BatchPosition p = full.positions[k];
    return RunToEnd(o, stats, true, BatchPosition{p.epoch, p.index + 1, p.end_record});
  };
  for (size_t k : {size_t{3}, size_t{20}, size_t{40}, full.positions.size() - 2}) {
    CAPTURE(k);
    StatsSnapshot stats;
    const auto rest = resume_after(k, &stats);
    REQUIRE(rest.status.ok());
    CHECK(rest.positions ==
          std::vector<BatchPosition>(full.positions.begin() + k + 1, full.positions.end()));
    CHECK(rest.image_bytes == full.image_bytes.substr(offsets[k + 1]));
    if (k == 40) {
      // 328 of 400 records passed over: only the rest (and the shuffle buffer's) are read.
      CHECK(ReadBytes(stats) < ReadBytes(full_stats) / 3);
    }
  }
  SECTION("an index that does not match its file is not trusted") {
    testing::WriteAll(IndexPathFor(shards.paths[2]), "0 16\n");
    StatsSnapshot stats;
    const auto rest = resume_after(40, &stats);
    REQUIRE(rest.status.ok());
    CHECK(rest.image_bytes == full.image_bytes.substr(offsets[41]));
  }
  SECTION("without their indexes, each is built from the file's headers on open") {
    for (const std::string& path : shards.paths)
      REQUIRE(std::filesystem::remove(IndexPathFor(path)));
    StatsSnapshot stats;
    const auto rest = resume_after(40, &stats);
    REQUIRE(rest.status.ok());
    CHECK(rest.positions ==
          std::vector<BatchPosition>(full.positions.begin() + 41, full.positions.end()));
    CHECK(rest.image_bytes == full.image_bytes.substr(offsets[41]));
    CHECK(ReadBytes(stats) < ReadBytes(full_stats) / 3);
    CHECK(stats.index_fallbacks == 0);
  }
}

// A rank of three sharing two files (record-level sharding) with a RECORDS cache, resumed in its
// first epoch (which fills the cache through the files' indexes, or indexes built on open) and in
// its second (served from the cache): exactly the batches, positions and image bytes the
// unresumed run gives after the same batch.
TEST_CASE("ARankSharingCachedFilesResumesExactlyWithTheFilesIndexesOrIndexesBuiltOnOpen") {
  for (bool indexed : {true, false}) {
    CAPTURE(indexed);
    TempDir dir;
    auto shards = WriteTestShards(dir, 2, 60);
    if (!indexed) {
      for (const std::string& path : shards.paths) {
        REQUIRE(std::filesystem::remove(IndexPathFor(path)));
      }
    }
    auto o = BaseOptions(dir);
    o.set_epochs(2);
    o.mutable_cache()->set_mode(v1::CACHE_RECORDS);
    o.mutable_shard()->set_index(1);
    o.mutable_shard()->set_count(3);
    const auto full = RunToEnd(o);
    REQUIRE(full.status.ok());
    const size_t image_bytes = 32 * 40 * 3;
    std::vector<size_t> offsets{0};
    for (int size : full.sizes) offsets.push_back(offsets.back() + size * image_bytes);
    REQUIRE(full.positions.size() > 8);
    for (size_t k : {size_t{1}, size_t{3}, full.positions.size() / 2, full.positions.size() - 2}) {
      CAPTURE(k);
      const BatchPosition p = full.positions[k];
      StatsSnapshot stats;
      const auto rest =
          RunToEnd(o, &stats, true, BatchPosition{p.epoch, p.index + 1, p.end_record});
      REQUIRE(rest.status.ok());
      CHECK(rest.positions ==
            std::vector<BatchPosition>(full.positions.begin() + k + 1, full.positions.end()));
      CHECK(rest.image_bytes == full.image_bytes.substr(offsets[k + 1]));
      CHECK(stats.index_fallbacks == 0);
    }
  }
}

// An index whose entries 10 and 11 are merged into one still tiles the file, so it passes the
// size check; trusted, it would make a resumed stream lose a record.
TEST_CASE("MergedIndexEntriesFallBackToReadingTheFileWithNoRecordLostOrDoubled") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 1, 60);
  std::vector<IndexEntry> merged = shards.index[0];
  merged[10].length += merged[11].length;
  merged.erase(merged.begin() + 11);
  REQUIRE(WriteRecordIndex(IndexPathFor(shards.paths[0]), merged).ok());
  auto o = BaseOptions(dir);
  o.mutable_shuffle()->set_buffer_size(0);
  const auto full = RunToEnd(o);
  REQUIRE(full.status.ok());
  // Resume after the third batch (24 records), past the merged entry.
  StatsSnapshot stats;
  const BatchPosition p = full.positions[2];
  const auto rest = RunToEnd(o, &stats, true, BatchPosition{p.epoch, p.index + 1, p.end_record});
  REQUIRE(rest.status.ok());
  std::vector<int32_t> labels(full.labels_by_epoch[0].begin(),
                              full.labels_by_epoch[0].begin() + 24);
  labels.insert(labels.end(), rest.labels_by_epoch[0].begin(), rest.labels_by_epoch[0].end());
  CHECK(Sorted(labels) == Iota(60));
  CHECK(stats.index_fallbacks == 1);
  CHECK(stats.skipped == 0);
}

}  // namespace
}  // namespace sluice

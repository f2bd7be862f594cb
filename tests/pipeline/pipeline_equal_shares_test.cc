// Equal shares through the whole pipeline: every shard of a data set of uneven files yields the
// same number of full batches per epoch; PAD marks its repeats invalid and keeps every record
// exactly once among the valid samples; DROP drops exactly the counted tail; skips that leave a
// shard short pad it; resumed streams continue exactly; unsharded streams are unchanged. PAD with
// an empty peer shard is refused for every peer; a count that falls short of what a PAD stream
// reads is warned of.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/record_index.h"
#include "pipeline/equal_shares.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::TempDir;

// Files of the given record counts; labels are global record ids, counted file by file.
struct Uneven {
  std::vector<std::string> paths;
  std::vector<int> first_id;  // per file
  std::vector<std::vector<IndexEntry>> index;
  int records = 0;
};

Uneven WriteUneven(const TempDir& dir, const std::vector<int>& sizes) {
  Uneven u;
  for (size_t f = 0; f < sizes.size(); ++f) {
    const std::string path = dir.file("shard-" + std::to_string(f) + ".tfrecord");
    auto writer = TFRecordWriter::Create(path);
    REQUIRE(writer.ok());
    u.first_id.push_back(u.records);
    for (int r = 0; r < sizes[f]; ++r, ++u.records) {
      std::string jpeg = testing::IdJpeg(u.records);
      REQUIRE((*writer)->Write(EncodeImageExample({jpeg, u.records, "c", 48, 64, "x"})).ok());
    }
    u.index.push_back((*writer)->index());
    REQUIRE((*writer)->Close().ok());
    u.paths.push_back(path);
  }
  return u;
}

struct Sample {
  int32_t label;
  bool valid;
  int32_t file;
  int64_t record;
};

struct Got {
  std::vector<BatchPosition> positions;
  std::vector<int> sizes;
  std::vector<std::vector<Sample>> batches;
  std::vector<std::string> images;  // per batch
  StatsSnapshot stats;
  Status status;
};

Got Run(const v1::PipelineOptions& o, BatchPosition start = {}) {
  Got g;
  auto resolved = ResolveOptions(o);
  REQUIRE(resolved.ok());
  resolved->record_ids = true;
  auto pipeline = Pipeline::FromResolved(*resolved);
  auto it = pipeline->MakeIterator(start);
  if (!it.ok()) {
    g.status = it.status();
    return g;
  }
  for (;;) {
    Batch b;
    bool end = false;
    g.status = (*it)->GetNext(&b, &end);
    if (!g.status.ok() || end) break;
    g.positions.push_back(b.position());
    g.sizes.push_back(b.size());
    std::vector<Sample> samples;
    const auto mask = b.valid_mask();
    CHECK((mask.empty() == (b.padded() == 0)));
    REQUIRE(b.record_files().size() == static_cast<size_t>(b.size()));
    for (int i = 0; i < b.size(); ++i) {
      samples.push_back({b.labels()[i], mask.empty() || mask[i] != 0, b.record_files()[i],
                         b.record_indexes()[i]});
    }
    g.batches.push_back(samples);
    g.images.emplace_back(reinterpret_cast<const char*>(b.images().data()), b.images().size());
  }
  g.stats = (*it)->Stats();
  return g;
}

v1::PipelineOptions Options(const TempDir& dir, int index, int count, v1::EqualShares mode) {
  v1::PipelineOptions o = testing::BaseOptions(dir);
  o.set_batch_size(4);
  o.mutable_shard()->set_index(index);
  o.mutable_shard()->set_count(count);
  o.set_equal_shares(mode);
  return o;
}

// Every sample's label is the global id of the record its ids name.
void CheckIds(const Got& g, const Uneven& u) {
  for (const auto& batch : g.batches) {
    for (const Sample& s : batch) {
      REQUIRE(s.file >= 0);
      CHECK(s.label == u.first_id[s.file] + s.record);
    }
  }
}

TEST_CASE("PadGivesEveryShardTheSameFullBatchesAndEveryRecordOnceAmongTheValid") {
  struct Layout {
    const char* name;
    std::vector<int> sizes;
    int64_t batches;  // ceil(largest shard / 4)
  };
  // Files >= shards: {0, 3}, {1, 4}, {2} hold 21, 22, 9. Fewer files: r % 3 of 10 and 8: 7, 6, 5.
  for (const Layout& layout :
       {Layout{"by file", {10, 13, 9, 11, 9}, 6}, Layout{"by record", {10, 8}, 2}}) {
    INFO(layout.name);
    TempDir dir;
    const Uneven u = WriteUneven(dir, layout.sizes);
    std::multiset<int32_t> valid;
    uint64_t padded = 0;
    for (int shard = 0; shard < 3; ++shard) {
      INFO("shard " << shard);
      const Got g = Run(Options(dir, shard, 3, v1::EQUAL_SHARES_PAD));
      REQUIRE(g.status.ok());
      CHECK(static_cast<int64_t>(g.sizes.size()) == layout.batches);
      for (int size : g.sizes) CHECK(size == 4);
      CheckIds(g, u);
      uint64_t shard_padded = 0;
      for (const auto& batch : g.batches) {
        bool seen_padding = false;
        for (const Sample& s : batch) {
          if (s.valid) {
            CHECK_FALSE(seen_padding);  // padding only at a batch's end
            valid.insert(s.label);
          } else {
            seen_padding = true;
            ++shard_padded;
          }
        }
      }
      CHECK(g.stats.padded_samples == shard_padded);
      CHECK(g.stats.dropped_records == 0);
      padded += shard_padded;
    }
    std::vector<int32_t> all(valid.begin(), valid.end());
    CHECK(all == testing::Iota(u.records));
    CHECK(padded == 3 * static_cast<uint64_t>(layout.batches) * 4 - u.records);
  }
}

TEST_CASE("DropGivesEveryShardTheSameFullBatchesAndDropsExactlyTheCountedTail") {
  TempDir dir;
  const Uneven u = WriteUneven(dir, {10, 13, 9, 11, 9});
  const int64_t shard_records[] = {21, 22, 9};
  std::set<int32_t> seen;
  for (int shard = 0; shard < 3; ++shard) {
    INFO("shard " << shard);
    const Got g = Run(Options(dir, shard, 3, v1::EQUAL_SHARES_DROP));
    REQUIRE(g.status.ok());
    CHECK(g.sizes == std::vector<int>{4, 4});  // floor(9 / 4)
    CheckIds(g, u);
    for (const auto& batch : g.batches) {
      for (const Sample& s : batch) {
        CHECK(s.valid);
        CHECK(seen.insert(s.label).second);
      }
    }
    CHECK(g.stats.dropped_records == static_cast<uint64_t>(shard_records[shard] - 8));
    CHECK(g.stats.padded_samples == 0);
  }
}

TEST_CASE("SkipsThatLeaveADropShardShortArePaddedAndMasked") {
  TempDir dir;
  const Uneven u = WriteUneven(dir, {10, 13, 9, 11, 9});
  // Shard 2 is file 2 alone: 9 records for 2 batches of 4; three corrupt leave 6.
  std::string data = testing::ReadAll(u.paths[2]);
  for (int r : {1, 4, 7}) data[u.index[2][r].offset + 12 + 3] ^= 0x20;
  testing::WriteAll(u.paths[2], data);
  const Got g = Run(Options(dir, 2, 3, v1::EQUAL_SHARES_DROP));
  REQUIRE(g.status.ok());
  CHECK(g.sizes == std::vector<int>{4, 4});
  REQUIRE(g.batches.size() == 2);
  CHECK(g.batches[0][3].valid);
  CHECK_FALSE(g.batches[1][2].valid);
  CHECK_FALSE(g.batches[1][3].valid);
  CHECK(g.stats.padded_samples == 2);
  CHECK(g.stats.skipped == 3);
  // The repeats are the epoch's first samples, ids and all.
  CHECK(g.batches[1][2].label == g.batches[0][0].label);
  CHECK(g.batches[1][3].label == g.batches[0][1].label);
  CHECK(g.images[1].substr(2 * 32 * 40 * 3, 32 * 40 * 3) == g.images[0].substr(0, 32 * 40 * 3));
  CheckIds(g, u);
}

TEST_CASE("ResumingMidEpochInTheDroppedTailAndInsideThePaddingContinuesExactly") {
  TempDir dir;
  WriteUneven(dir, {10, 13, 9, 11, 9});
  for (auto mode : {v1::EQUAL_SHARES_PAD, v1::EQUAL_SHARES_DROP}) {
    for (int shard = 0; shard < 3; ++shard) {
      v1::PipelineOptions o = Options(dir, shard, 3, mode);
      o.set_epochs(2);
      const Got all = Run(o);
      REQUIRE(all.status.ok());
      for (size_t k = 0; k < all.positions.size(); ++k) {
        INFO("mode " << mode << " shard " << shard << ", after batch " << k);
        BatchPosition after = all.positions[k];
        ++after.index;
        const Got rest = Run(o, after);
        REQUIRE(rest.status.ok());
        REQUIRE(rest.positions.size() == all.positions.size() - k - 1);
        for (size_t j = 0; j < rest.positions.size(); ++j) {
          const size_t i = k + 1 + j;
          CHECK(rest.positions[j] == all.positions[i]);
          REQUIRE(rest.batches[j].size() == all.batches[i].size());
          for (size_t s = 0; s < rest.batches[j].size(); ++s) {
            const Sample& want = all.batches[i][s];
            const Sample& got = rest.batches[j][s];
            CHECK(got.valid == want.valid);
            // Real samples are the same; padding repeats what this run saw of the epoch.
            if (want.valid) CHECK(got.label == want.label);
          }
          if (all.positions[i].epoch > after.epoch) CHECK(rest.images[j] == all.images[i]);
        }
      }
    }
  }
}

TEST_CASE("AResumedStreamThatSawNoSampleOfTheEpochPadsWithZeroImages") {
  TempDir dir;
  WriteUneven(dir, {10, 13, 9, 11, 9});
  const v1::PipelineOptions o = Options(dir, 2, 3, v1::EQUAL_SHARES_PAD);
  const Got all = Run(o);
  REQUIRE(all.positions.size() == 6);
  // Batch 2 holds shard 2's last record and three repeats; 3 to 5 are padding only.
  BatchPosition after = all.positions[2];
  ++after.index;
  const Got rest = Run(o, after);
  REQUIRE(rest.status.ok());
  REQUIRE(rest.batches.size() == 3);
  for (size_t j = 0; j < 3; ++j) {
    CHECK(rest.images[j] == std::string(rest.images[j].size(), '\0'));
    for (const Sample& s : rest.batches[j]) {
      CHECK_FALSE(s.valid);
      CHECK(s.label == 0);
      CHECK(s.file == -1);
      CHECK(s.record == -1);
    }
  }
}

TEST_CASE("EveryEpochYieldsTheEqualShareAndALaterEpochStartsAlone") {
  TempDir dir;
  WriteUneven(dir, {10, 13, 9, 11, 9});
  v1::PipelineOptions o = Options(dir, 1, 3, v1::EQUAL_SHARES_PAD);
  o.set_epochs(3);
  const Got all = Run(o);
  REQUIRE(all.status.ok());
  std::map<int64_t, int> per_epoch;
  for (const BatchPosition& p : all.positions) ++per_epoch[p.epoch];
  CHECK(per_epoch == std::map<int64_t, int>{{0, 6}, {1, 6}, {2, 6}});
  const Got later = Run(o, BatchPosition{1, 0, 0, 0});
  REQUIRE(later.positions.size() == 12);
  for (size_t j = 0; j < 12; ++j) {
    CHECK(later.positions[j] == all.positions[6 + j]);
    CHECK(later.images[j] == all.images[6 + j]);
  }
}

TEST_CASE("UnshardedStreamsAreTheSameWhateverEqualShares") {
  TempDir dir;
  WriteUneven(dir, {10, 13, 9});
  v1::PipelineOptions o = testing::BaseOptions(dir);
  o.set_batch_size(5);
  o.set_equal_shares(v1::EQUAL_SHARES_OFF);
  const testing::Collected off = testing::RunToEnd(o);
  REQUIRE(off.status.ok());
  CHECK(off.sizes.back() == 2);  // 32 records: the last batch partial, as before
  for (auto mode : {v1::EQUAL_SHARES_DEFAULT, v1::EQUAL_SHARES_DROP, v1::EQUAL_SHARES_PAD}) {
    o.set_equal_shares(mode);
    const testing::Collected c = testing::RunToEnd(o);
    CHECK(c.positions == off.positions);
    CHECK(c.sizes == off.sizes);
    CHECK(c.labels_by_epoch == off.labels_by_epoch);
    CHECK(c.image_bytes == off.image_bytes);
  }
}

TEST_CASE("ShardedStreamsWithEqualSharesOffKeepTheirOwnCounts") {
  TempDir dir;
  WriteUneven(dir, {10, 13, 9, 11, 9});
  const Got g = Run(Options(dir, 2, 3, v1::EQUAL_SHARES_OFF));
  REQUIRE(g.status.ok());
  CHECK(g.sizes == std::vector<int>{4, 4, 1});
  for (const auto& batch : g.batches) {
    for (const Sample& s : batch) CHECK(s.valid);
  }
}

// An .idx that tiles its file but merges two entries makes the file's count one short: the largest
// shard's equal batches then hold one record less than it reads. The batches stay equal, so that
// record is dropped, but loudly: counted and warned of, naming the shard and the stale index.
TEST_CASE("PadWithAnIndexThatMergesTwoRecordsWarnsOfTheRecordItDrops") {
  TempDir dir;
  const Uneven u = WriteUneven(dir, {10, 13, 9});
  std::vector<IndexEntry> merged = u.index[1];
  merged[0].length += merged[1].length;
  merged.erase(merged.begin() + 1);
  REQUIRE(WriteRecordIndex(IndexPathFor(u.paths[1]), merged).ok());
  std::set<int32_t> valid;
  uint64_t dropped = 0;
  std::string warnings;
  for (int shard = 0; shard < 3; ++shard) {
    testing::StderrCapture err;
    const Got g = Run(Options(dir, shard, 3, v1::EQUAL_SHARES_PAD));
    warnings += err.Text();
    REQUIRE(g.status.ok());
    CHECK(g.sizes.size() == 3);  // ceil(12 counted / 4) for every shard
    for (const auto& batch : g.batches) {
      for (const Sample& s : batch) {
        if (s.valid) valid.insert(s.label);
      }
    }
    dropped += g.stats.dropped_records;
  }
  INFO(warnings);
  CHECK(dropped == 1);
  CHECK(static_cast<int>(valid.size()) == u.records - 1);
  CHECK(warnings.find("epoch 0 of shard 1 of 3 read 1 more records than its 3 equal batches") !=
        std::string::npos);
  CHECK(warnings.find("record count from the files was short") != std::string::npos);
  CHECK(warnings.find("sluice index") != std::string::npos);
  CHECK(warnings.find("shard 0 of 3 read") == std::string::npos);
}

// A peer shard with no records has nothing to pad from: PAD refuses every peer the same way, so
// no rank streams while another fails.
TEST_CASE("PadWithAnEmptyPeerShardIsRefusedForEveryPeer") {
  TempDir dir;
  WriteUneven(dir, {10, 0, 10});
  for (int shard = 0; shard < 3; ++shard) {
    const Got g = Run(Options(dir, shard, 3, v1::EQUAL_SHARES_PAD));
    INFO("shard " << shard << ": " << g.status.ToString());
    CHECK(g.status.code() == StatusCode::kFailedPrecondition);
    CHECK(g.sizes.empty());
    const std::string& m = g.status.message();
    CHECK(m.find("equal shares (PAD)") != std::string::npos);
    CHECK(m.find("shard 1, the smallest of the 3 consumers' shards, holds 0 records") !=
          std::string::npos);
    CHECK(m.find("equal_shares PAD") == std::string::npos);  // already PAD: not suggested
  }
}

// start_position.index at or past the epoch's equal batches (end_record 0): every record falls
// past them; the error says so, not "drop_remainder".
TEST_CASE("AStartIndexPastTheEqualBatchesFailsNamingIt") {
  TempDir dir;
  WriteUneven(dir, {10, 13, 9});
  // DROP: floor(9 / 4) = 2 equal batches per shard.
  for (auto mode : {v1::EQUAL_SHARES_DROP, v1::EQUAL_SHARES_PAD}) {
    const Got g = Run(Options(dir, 0, 3, mode), BatchPosition{0, 5, 0, 0});
    INFO(g.status.ToString());
    CHECK(g.status.code() == StatusCode::kFailedPrecondition);
    CHECK(g.sizes.empty());
    CHECK(g.status.message().find("starts at batch index 5 (start_position.index)") !=
          std::string::npos);
    CHECK(g.status.message().find("drop_remainder") == std::string::npos);
  }
}

// DescribeStream's batches_per_epoch for an unsharded stream counts every record, corrupt ones
// included: skips shorten the epoch, so it is an upper bound there (StreamPlan).
TEST_CASE("AnUnshardedPlanIsAnUpperBoundWhenARecordIsCorrupt") {
  TempDir dir;
  const Uneven u = WriteUneven(dir, {10});
  std::string data = testing::ReadAll(u.paths[0]);
  data[u.index[0][4].offset + 12 + 3] ^= 0x20;  // a payload byte: the data CRC fails
  testing::WriteAll(u.paths[0], data);
  v1::PipelineOptions o = testing::BaseOptions(dir);
  o.set_batch_size(3);
  auto resolved = ResolveOptions(o);
  REQUIRE(resolved.ok());
  auto plan = PlanSharesForFiles(*resolved);
  REQUIRE(plan.ok());
  CHECK(plan->batches_per_epoch == 4);  // ceil(10 / 3)
  const Got g = Run(o);
  REQUIRE(g.status.ok());
  CHECK(g.sizes.size() == 3);  // 9 usable records
}

}  // namespace
}  // namespace sluice

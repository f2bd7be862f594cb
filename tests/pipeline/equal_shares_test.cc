// The equal-share plan: every shard's records from the files' counts by the sharding rule (whole
// files, or every count-th record), and the batches per epoch DROP, PAD and OFF give, rounded to
// a multiple of a job's consumers in lockstep.
#include "pipeline/equal_shares.h"

#include <catch2/catch.hpp>
#include <vector>

#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

ResolvedOptions Sharded(int files, int index, int count, EqualShares mode, int batch) {
  ResolvedOptions o;
  for (int f = 0; f < files; ++f) o.files.push_back("f" + std::to_string(f));
  o.shard_index = index;
  o.shard_count = count;
  o.shard_consumers = count;
  o.equal_shares = mode;
  o.batch_size = batch;
  return o;
}

std::vector<FileRecords> Counts(const std::vector<uint64_t>& records) {
  std::vector<FileRecords> out;
  for (uint64_t r : records) out.push_back({r, false});
  return out;
}

TEST_CASE("UnevenFilesShardedByFileGiveDropTheSmallestAndPadTheLargestShare") {
  // Shards of 3 over 5 files: {0, 3}, {1, 4}, {2}.
  const auto counts = Counts({10, 13, 9, 11, 9});
  CHECK(ShardRecords(Sharded(5, 0, 3, EqualShares::kDrop, 4), counts) ==
        std::vector<int64_t>{21, 22, 9});
  for (int shard = 0; shard < 3; ++shard) {
    const SharePlan drop = PlanShares(Sharded(5, shard, 3, EqualShares::kDrop, 4), counts);
    CHECK(drop.batches_per_epoch == 2);
    CHECK(drop.min_shard_records == 9);
    CHECK(drop.max_shard_records == 22);
    const SharePlan pad = PlanShares(Sharded(5, shard, 3, EqualShares::kPad, 4), counts);
    CHECK(pad.batches_per_epoch == 6);
    CHECK(pad.records_per_epoch == std::vector<int64_t>{21, 22, 9}[shard]);
  }
  // Off: each shard as it is, its last batch partial or dropped.
  ResolvedOptions off = Sharded(5, 0, 3, EqualShares::kOff, 4);
  CHECK(PlanShares(off, counts).equal_shares == EqualShares::kOff);
  CHECK(PlanShares(off, counts).batches_per_epoch == 6);
  off.drop_remainder = true;
  CHECK(PlanShares(off, counts).batches_per_epoch == 5);
}

TEST_CASE("FewerFilesThanShardsShareEveryCountthRecordOfEachFile") {
  // Records r % 3 == i of files of 10 and 8: 4 + 3, 3 + 3, 3 + 2.
  const auto counts = Counts({10, 8});
  CHECK(ShardRecords(Sharded(2, 0, 3, EqualShares::kPad, 2), counts) ==
        std::vector<int64_t>{7, 6, 5});
  CHECK(PlanShares(Sharded(2, 1, 3, EqualShares::kPad, 2), counts).batches_per_epoch == 4);
  CHECK(PlanShares(Sharded(2, 1, 3, EqualShares::kDrop, 2), counts).batches_per_epoch == 2);
  // An unreadable file is one bad record in every shard that opens it.
  std::vector<FileRecords> unreadable = counts;
  unreadable[1] = {1, true};
  CHECK(ShardRecords(Sharded(2, 0, 3, EqualShares::kPad, 2), unreadable) ==
        std::vector<int64_t>{5, 4, 4});
}

TEST_CASE("UnshardedStreamsAreNotEqualized") {
  ResolvedOptions o = Sharded(2, 0, 1, EqualShares::kDrop, 4);
  const SharePlan plan = PlanShares(o, Counts({5, 6}));
  CHECK(plan.equal_shares == EqualShares::kOff);
  CHECK(plan.records_per_epoch == 11);
  CHECK(plan.min_shard_records == 11);
  CHECK(plan.max_shard_records == 11);
  CHECK(plan.batches_per_epoch == 3);
}

TEST_CASE("DropWithAShardSmallerThanABatchIsRefusedNamingTheShard") {
  testing::TempDir dir;
  testing::WriteTestShards(dir, 3, 2);
  v1::PipelineOptions o = testing::BaseOptions(dir);
  o.mutable_shard()->set_index(0);
  o.mutable_shard()->set_count(3);
  o.set_equal_shares(v1::EQUAL_SHARES_DROP);
  auto options = ResolveOptions(o);
  REQUIRE(options.ok());
  auto plan = PlanSharesForFiles(*options);
  CHECK(plan.status().code() == StatusCode::kFailedPrecondition);
  CHECK(plan.status().message().find(
            "shard 0, the smallest of the 3 consumers' shards, holds 2 records") !=
        std::string::npos);
  // The pipeline refuses it the same way when it starts.
  auto pipeline = Pipeline::Create(o);
  REQUIRE(pipeline.ok());
  CHECK((*pipeline)->MakeIterator().status().code() == StatusCode::kFailedPrecondition);
  // PAD gives each shard one batch.
  o.set_equal_shares(v1::EQUAL_SHARES_PAD);
  options = ResolveOptions(o);
  REQUIRE(options.ok());
  REQUIRE(PlanSharesForFiles(*options).ok());
  CHECK(PlanSharesForFiles(*options)->batches_per_epoch == 1);
}

TEST_CASE("DefaultIsDropInTrainingAndPadInEvaluation") {
  v1::PipelineOptions train;
  train.set_mode(v1::MODE_TRAIN);
  v1::PipelineOptions eval;
  eval.set_mode(v1::MODE_EVAL);
  testing::TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  train.add_files(dir.file("shard-*.tfrecord"));
  eval.add_files(dir.file("shard-*.tfrecord"));
  CHECK(ResolveOptions(train)->equal_shares == EqualShares::kDrop);
  CHECK(ResolveOptions(eval)->equal_shares == EqualShares::kPad);
  eval.set_equal_shares(v1::EQUAL_SHARES_OFF);
  CHECK(ResolveOptions(eval)->equal_shares == EqualShares::kOff);
}

TEST_CASE("PeersAreTheConsumersWithinOneServersPartNotTheOtherParts") {
  // Two servers' parts (--shard I/2) and two consumers (request shard r/2): combined shard
  // I + 2·r of 4, one file each. Shard 0's peer is shard 2 (server 0's part), shard 1's is 3.
  const auto counts = Counts({10, 13, 9, 11});
  ResolvedOptions o = Sharded(4, 0, 4, EqualShares::kDrop, 2);
  o.shard_consumers = 2;
  SharePlan p = PlanShares(o, counts);
  CHECK(p.min_shard_records == 9);
  CHECK(p.max_shard_records == 10);
  CHECK(p.batches_per_epoch == 4);
  o.shard_index = 3;
  p = PlanShares(o, counts);
  CHECK(p.min_shard_records == 11);
  CHECK(p.max_shard_records == 13);
  CHECK(p.batches_per_epoch == 5);
  // One consumer of a server's part (a client fanning in from the fleet): nothing to equalize.
  o.shard_consumers = 1;
  p = PlanShares(o, counts);
  CHECK(p.equal_shares == EqualShares::kOff);
  CHECK(p.batches_per_epoch == 6);  // 11 records, the last batch partial
}

TEST_CASE("ConsumersThatDoNotDivideTheShardCountAreRefused") {
  testing::TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.mutable_shard()->set_index(0);
  o.mutable_shard()->set_count(4);
  o.mutable_shard()->set_consumers(3);
  auto r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("shard.consumers 3") != std::string::npos);
  o.mutable_shard()->set_consumers(2);
  REQUIRE(ResolveOptions(o).ok());
  CHECK(ResolveOptions(o)->shard_consumers == 2);
}

// A --shard I/N server's stream counts the files of its own part's consumers, never the fleet's
// other parts; a plan that shards records reads, and counts, every file.
TEST_CASE("APlanCountsOnlyTheFilesItsPeersRead") {
  testing::TempDir dir;
  testing::WriteTestShards(dir, 8, 3);
  v1::PipelineOptions o = testing::BaseOptions(dir);
  o.mutable_shard()->set_index(3);
  o.mutable_shard()->set_count(8);
  o.mutable_shard()->set_consumers(1);  // one consumer of server 3's part of 8
  auto options = ResolveOptions(o);
  REQUIRE(options.ok());
  CHECK(PeerFiles(*options) ==
        std::vector<bool>{false, false, false, true, false, false, false, false});
  uint64_t before = RecordCountScans();
  auto plan = PlanSharesForFiles(*options);
  REQUIRE(plan.ok());
  CHECK(RecordCountScans() - before == 1);
  CHECK(plan->records_per_epoch == 3);

  // Two consumers of server 3's part of 4 (combined shard 3 + 4·r of 8): peers 3 and 7.
  o.mutable_shard()->set_consumers(2);
  o.set_equal_shares(v1::EQUAL_SHARES_PAD);
  options = ResolveOptions(o);
  REQUIRE(options.ok());
  CHECK(PeerFiles(*options) ==
        std::vector<bool>{false, false, false, true, false, false, false, true});
  before = RecordCountScans();
  plan = PlanSharesForFiles(*options);
  REQUIRE(plan.ok());
  CHECK(RecordCountScans() - before == 1);  // file 3 is cached; file 7 is new
  CHECK(plan->min_shard_records == 3);
  CHECK(plan->max_shard_records == 3);

  // Fewer files than shards: every shard takes records of every file.
  testing::TempDir few;
  testing::WriteTestShards(few, 2, 8);
  v1::PipelineOptions r = testing::BaseOptions(few);
  r.mutable_shard()->set_index(1);
  r.mutable_shard()->set_count(4);
  r.set_equal_shares(v1::EQUAL_SHARES_PAD);
  options = ResolveOptions(r);
  REQUIRE(options.ok());
  CHECK(PeerFiles(*options) == std::vector<bool>{true, true});
  before = RecordCountScans();
  REQUIRE(PlanSharesForFiles(*options).ok());
  CHECK(RecordCountScans() - before == 2);
}

TEST_CASE("AJobInLockstepRoundsItsEpochToAMultipleOfItsConsumersDropDownPadUp") {
  // 50 records in batches of 4: 12 full, 13 with the partial one.
  const auto counts = Counts({10, 13, 9, 11, 7});
  struct Case {
    int consumers;
    int64_t drop;
    int64_t pad;
  };
  for (const Case& c : {Case{1, 12, 13}, Case{2, 12, 14}, Case{3, 12, 15}, Case{5, 10, 15},
                        Case{7, 7, 14}, Case{12, 12, 24}, Case{13, 0, 13}}) {
    INFO(c.consumers << " consumers");
    ResolvedOptions o = Sharded(5, 0, 1, EqualShares::kDrop, 4);
    o.job_consumers = c.consumers;
    CHECK(o.equalizes());
    SharePlan plan = PlanShares(o, counts);
    CHECK(plan.equal_shares == EqualShares::kDrop);
    CHECK(plan.records_per_epoch == 50);
    CHECK(plan.batches_per_epoch == c.drop);
    o.equal_shares = EqualShares::kPad;
    plan = PlanShares(o, counts);
    CHECK(plan.equal_shares == EqualShares::kPad);
    CHECK(plan.batches_per_epoch == c.pad);
    o.equal_shares = EqualShares::kOff;
    CHECK_FALSE(o.equalizes());
  }
  // A sharded job in lockstep: the smallest peer's full batches (9 records: 2) rounded down,
  // the largest peer's (22 records: 6) rounded up.
  ResolvedOptions sharded = Sharded(5, 1, 3, EqualShares::kDrop, 4);
  sharded.job_consumers = 2;
  CHECK(PlanShares(sharded, Counts({10, 13, 9, 11, 9})).batches_per_epoch == 2);
  sharded.job_consumers = 4;
  CHECK(PlanShares(sharded, Counts({10, 13, 9, 11, 9})).batches_per_epoch == 0);
  sharded.equal_shares = EqualShares::kPad;
  CHECK(PlanShares(sharded, Counts({10, 13, 9, 11, 9})).batches_per_epoch == 8);
}

TEST_CASE("DropWithFewerFullBatchesThanConsumersIsRefusedNamingTheCounts") {
  testing::TempDir dir;
  testing::WriteTestShards(dir, 2, 5);  // 10 records: 1 full batch of 8
  v1::PipelineOptions o = testing::BaseOptions(dir);
  o.set_batch_size(4);  // 2 full batches
  o.set_equal_shares(v1::EQUAL_SHARES_DROP);
  auto options = ResolveOptions(o, 3);
  REQUIRE(options.ok());
  auto plan = PlanSharesForFiles(*options);
  CHECK(plan.status().code() == StatusCode::kFailedPrecondition);
  CHECK(plan.status().message() ==
        "equal shares (DROP) give no batch to each of the job's 3 consumers (num_consumers): an "
        "epoch of the job holds 10 records, 2 full batches of batch_size 4, fewer than its 3 "
        "consumers; use a smaller batch_size, fewer consumers, or equal_shares PAD");
  // Two consumers: one batch each.
  options = ResolveOptions(o, 2);
  REQUIRE(options.ok());
  REQUIRE(PlanSharesForFiles(*options).ok());
  CHECK(PlanSharesForFiles(*options)->batches_per_epoch == 2);
  // PAD: the third consumer's batch is the partial one padded.
  o.set_equal_shares(v1::EQUAL_SHARES_PAD);
  options = ResolveOptions(o, 3);
  REQUIRE(options.ok());
  REQUIRE(PlanSharesForFiles(*options).ok());
  CHECK(PlanSharesForFiles(*options)->batches_per_epoch == 3);
}

TEST_CASE("AJobInLockstepBudgetsTheBufferThatPadsIt") {
  testing::TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  v1::PipelineOptions o = testing::BaseOptions(dir);
  auto alone = ResolveOptions(o);
  auto lockstep = ResolveOptions(o, 2);
  REQUIRE(alone.ok());
  REQUIRE(lockstep.ok());
  CHECK(lockstep->job_consumers == 2);
  // One batch more in the pool's share leaves that much less for records, decoding and the
  // shuffle buffer.
  auto rest = [](const ResolvedOptions& r) {
    return r.records_budget_bytes + r.decode_budget_bytes + r.shuffle_budget_bytes;
  };
  CHECK(rest(*alone) - rest(*lockstep) == static_cast<int64_t>(alone->batch_image_bytes()));
}

}  // namespace
}  // namespace sluice

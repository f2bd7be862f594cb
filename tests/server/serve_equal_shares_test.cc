// Equal shares against a real `sluice serve`: three shard streams over files of uneven sizes get
// the same number of full batches, with the valid mask and record ids right on the wire; the
// batches DescribeStream announces are the batches streamed; DescribeStream refuses what
// StreamBatches refuses; the dropped and padded counters reach GetStats and /metrics. Batches are
// read as raw v1::Batch messages through the generated stub.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::FetchMetrics;
using serve_testing::kIdShardFirstId;
using serve_testing::kIdShardRecords;
using serve_testing::kIdShardSizes;
using serve_testing::Raw;
using serve_testing::ReadRaw;
using serve_testing::Request;
using serve_testing::Stub;
using serve_testing::WriteIdShards;
using testing::ServerProcess;
using testing::TempDir;

// The id shards, in one epoch of batches of 4 at 32x32. Three shards take files {0, 3}, {1, 4}
// and {2}: 21, 22 and 9 records.
std::string WriteDataset(const TempDir& dir, const std::string& config_extra = "") {
  WriteIdShards(dir, kIdShardSizes);
  const std::string path = dir.file("sluice.textproto");
  testing::WriteAll(path, "listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\n" +
                              config_extra + "datasets {\n  name: \"train\"\n  pipeline {\n" +
                              "    files: \"" + dir.file("shard-*.tfrecord") +
                              "\"\n    batch_size: 4\n    image_height: 32\n    threads: 2\n" +
                              "    epochs: 1\n    memory_budget_bytes: 67108864\n  }\n}\n");
  return path;
}

grpc::Status Describe(const std::string& address, const v1::StreamRequest& r, v1::StreamPlan* p) {
  auto stub = Stub(address);
  grpc::ClientContext context;
  return stub->DescribeStream(&context, r, p);
}

v1::StreamRequest ShardRequest(int shard, std::optional<v1::EqualShares> mode) {
  v1::StreamRequest r = Request();
  r.mutable_shard()->set_index(shard);
  r.mutable_shard()->set_count(3);
  if (mode) r.set_equal_shares(*mode);
  r.set_record_ids(true);
  return r;
}

TEST_CASE("ThreeShardStreamsOfUnevenFilesGetEqualFullBatchesWithMasksAndIds") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir)});
  REQUIRE(server.running());
  struct Mode {
    std::optional<v1::EqualShares> asked;
    v1::EqualShares resolved;
    int64_t batches;
  };
  // DROP (the default in training): floor(9 / 4); PAD: ceil(22 / 4).
  for (const Mode& mode : {Mode{std::nullopt, v1::EQUAL_SHARES_DROP, 2},
                           Mode{v1::EQUAL_SHARES_PAD, v1::EQUAL_SHARES_PAD, 6}}) {
    INFO(v1::EqualShares_Name(mode.resolved));
    std::multiset<int32_t> valid;
    for (int shard = 0; shard < 3; ++shard) {
      INFO("shard " << shard);
      const v1::StreamRequest r = ShardRequest(shard, mode.asked);
      v1::StreamPlan plan;
      REQUIRE(Describe(server.address(), r, &plan).ok());
      CHECK(plan.equal_shares() == mode.resolved);
      CHECK(plan.batches_per_epoch() == mode.batches);
      CHECK(plan.records_per_epoch() == std::vector<int64_t>{21, 22, 9}[shard]);
      CHECK(plan.min_shard_records() == 9);
      CHECK(plan.max_shard_records() == 22);
      CHECK(plan.shard().index() == shard);
      CHECK(plan.shard().count() == 3);
      CHECK(plan.batch_size() == 4);

      const Raw raw = ReadRaw(server.address(), r);
      REQUIRE(raw.status.ok());
      CHECK(static_cast<int64_t>(raw.batches.size()) == plan.batches_per_epoch());
      for (const v1::Batch& b : raw.batches) {
        REQUIRE(b.shape_size() == 4);
        CHECK(b.shape(0) == 4);
        REQUIRE(b.labels_size() == 4);
        REQUIRE(b.record_files_size() == 4);
        REQUIRE(b.record_indexes_size() == 4);
        CHECK((b.valid_size() == 0 || b.valid_size() == 4));
        for (int i = 0; i < 4; ++i) {
          // Padding names the record it repeats, label and all.
          CHECK(b.labels(i) == kIdShardFirstId[b.record_files(i)] + b.record_indexes(i));
          const bool real = b.valid_size() == 0 || b.valid(i);
          if (real) valid.insert(b.labels(i));
        }
      }
    }
    std::vector<int32_t> labels(valid.begin(), valid.end());
    if (mode.resolved == v1::EQUAL_SHARES_PAD) {
      CHECK(labels == testing::Iota(kIdShardRecords));  // every record exactly once
    } else {
      CHECK(labels.size() == 3 * 2 * 4);
      CHECK(std::set<int32_t>(labels.begin(), labels.end()).size() == labels.size());
    }
  }
  // Without record_ids nothing per sample is sent for a batch of real samples.
  v1::StreamRequest plain = ShardRequest(0, v1::EQUAL_SHARES_DROP);
  plain.set_record_ids(false);
  const Raw raw = ReadRaw(server.address(), plain);
  REQUIRE(raw.status.ok());
  REQUIRE(raw.batches.size() == 2);
  CHECK(raw.batches[0].record_files_size() == 0);
  CHECK(raw.batches[0].valid_size() == 0);
}

TEST_CASE("DescribeStreamRefusesWhatStreamBatchesRefusesWithTheSameCode") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir)});
  REQUIRE(server.running());
  v1::StreamRequest unknown = Request("nope");
  v1::StreamRequest negative = Request();
  negative.set_batch_size(-1);
  // DROP with batches of 16: the smallest shard (9 records) fills none.
  v1::StreamRequest no_batch = ShardRequest(0, v1::EQUAL_SHARES_DROP);
  no_batch.set_batch_size(16);
  v1::StreamRequest bad_mode = Request();
  bad_mode.set_equal_shares(static_cast<v1::EqualShares>(9));
  for (const auto& [r, code] :
       {std::pair{unknown, grpc::StatusCode::NOT_FOUND},
        std::pair{negative, grpc::StatusCode::INVALID_ARGUMENT},
        std::pair{no_batch, grpc::StatusCode::FAILED_PRECONDITION},
        std::pair{bad_mode, grpc::StatusCode::INVALID_ARGUMENT}}) {
    v1::StreamPlan plan;
    const grpc::Status described = Describe(server.address(), r, &plan);
    const Raw streamed = ReadRaw(server.address(), r);
    INFO(described.error_message());
    CHECK(described.error_code() == code);
    CHECK(streamed.status.error_code() == code);
    CHECK(streamed.batches.empty());
  }
  // Unsharded: the stream as it is, its last batch partial.
  v1::StreamPlan plan;
  REQUIRE(Describe(server.address(), Request(), &plan).ok());
  CHECK(plan.records_per_epoch() == kIdShardRecords);
  CHECK(plan.batches_per_epoch() == 13);
  CHECK(plan.shard().count() == 1);
  const Raw all = ReadRaw(server.address(), Request());
  REQUIRE(all.status.ok());
  CHECK(all.batches.size() == 13);
}

TEST_CASE("DroppedRecordsAndPaddedSamplesReachGetStatsAndMetrics") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, "job_linger_seconds: 60\n")});
  REQUIRE(server.running());
  // Shared jobs of one consumer each linger after their stream, so their counters can be read.
  v1::StreamRequest drop = ShardRequest(1, v1::EQUAL_SHARES_DROP);  // 22 records, 8 used
  drop.set_job_name("drop");
  v1::StreamRequest pad = ShardRequest(2, v1::EQUAL_SHARES_PAD);  // 9 records in 6 batches
  pad.set_job_name("pad");
  REQUIRE(ReadRaw(server.address(), drop).status.ok());
  REQUIRE(ReadRaw(server.address(), pad).status.ok());
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->jobs_size() == 2);
  for (const v1::JobStats& j : stats->jobs()) {
    INFO(j.name());
    CHECK(j.dropped_records() == (j.name() == "drop" ? 14u : 0u));
    CHECK(j.padded_samples() == (j.name() == "pad" ? 15u : 0u));
  }
  const std::string metrics = FetchMetrics(server);
  CHECK(metrics.find("sluice_job_dropped_records_total{dataset=\"train\",job=\"drop\"} 14\n") !=
        std::string::npos);
  CHECK(metrics.find("sluice_job_padded_samples_total{dataset=\"train\",job=\"pad\"} 15\n") !=
        std::string::npos);
}

}  // namespace
}  // namespace sluice

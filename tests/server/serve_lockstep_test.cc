// A shared job's consumers in lockstep (StreamRequest.num_consumers) against a real `sluice
// serve`: each gets the same number of full batches per epoch, batch i of an epoch going to
// consumer i mod N; a run named by its start epoch is that epoch of a run from 0; a consumer that
// reconnects, or a stream that takes its index over, continues its share; an absent consumer
// ends the job for all with ABORTED; requests that cannot join are refused naming the field.
// Batches are read as raw v1::Batch messages through the generated stub.
#include <arpa/inet.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::FetchMetrics;
using serve_testing::kIdShardFirstId;
using serve_testing::kIdShardRecords;
using serve_testing::kIdShardSizes;
using serve_testing::Request;
using serve_testing::StatsWhen;
using serve_testing::WriteIdShards;
using testing::ServerProcess;
using testing::TempDir;

// The id shards (52 records, 13 full batches of 4 per epoch) in two epochs of batches of 4 at
// 32x32, shared jobs lingering `linger` seconds. A job reserves 64 MiB; `server_budget`
// (bytes; 0: the default) is the server's memory_budget_bytes.
std::string WriteDataset(const TempDir& dir, int linger, int64_t server_budget = 0) {
  WriteIdShards(dir, kIdShardSizes);
  const std::string path = dir.file("sluice.textproto");
  testing::WriteAll(
      path, std::string("listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\n") +
                "job_linger_seconds: " + std::to_string(linger) + "\n" +
                (server_budget > 0 ? "memory_budget_bytes: " + std::to_string(server_budget) + "\n"
                                   : std::string()) +
                "datasets {\n  name: \"train\"\n" + "  pipeline {\n    files: \"" +
                dir.file("shard-*.tfrecord") +
                "\"\n    batch_size: 4\n    image_height: 32\n    threads: 2\n" +
                "    epochs: 2\n    memory_budget_bytes: 67108864\n  }\n}\n");
  return path;
}

// A channel of its own whose flow-control window stays at gRPC's 64 KiB default (no bandwidth
// probing): a batch larger than that is written only as the client reads it.
std::unique_ptr<v1::DataService::Stub> Stub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::DataService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

struct Raw {
  grpc::Status status;
  std::vector<v1::Batch> batches;
};

// One stream, read to its end; or cut (the client cancels) after `cut` batches.
Raw ReadRaw(const std::string& address, const v1::StreamRequest& r,
            std::optional<size_t> cut = std::nullopt) {
  auto stub = Stub(address);
  grpc::ClientContext context;
  auto reader = stub->StreamBatches(&context, r);
  Raw out;
  v1::Batch b;
  while ((!cut || out.batches.size() < *cut) && reader->Read(&b)) out.batches.push_back(b);
  if (cut) context.TryCancel();
  out.status = reader->Finish();
  return out;
}

// The streams read at once, one thread each (lockstep needs every consumer reading).
std::vector<Raw> ReadTogether(const std::string& address,
                              const std::vector<v1::StreamRequest>& requests) {
  std::vector<Raw> out(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = ReadRaw(address, requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

grpc::Status Describe(const std::string& address, const v1::StreamRequest& r, v1::StreamPlan* p) {
  grpc::ClientContext context;
  return Stub(address)->DescribeStream(&context, r, p);
}

v1::StreamRequest Lockstep(const std::string& job, int index, int consumers,
                           std::optional<v1::EqualShares> mode = std::nullopt) {
  v1::StreamRequest r = Request();
  r.set_job_name(job);
  r.set_consumer_index(index);
  r.set_num_consumers(consumers);
  if (mode) r.set_equal_shares(*mode);
  r.set_record_ids(true);
  return r;
}

std::vector<v1::StreamRequest> AllOf(const std::string& job, int consumers,
                                     std::optional<v1::EqualShares> mode = std::nullopt) {
  std::vector<v1::StreamRequest> out;
  for (int i = 0; i < consumers; ++i) out.push_back(Lockstep(job, i, consumers, mode));
  return out;
}

using Position = std::pair<int64_t, int64_t>;  // epoch, index

std::vector<Position> Positions(const std::vector<v1::Batch>& batches) {
  std::vector<Position> out;
  for (const v1::Batch& b : batches) out.emplace_back(b.position().epoch(), b.position().index());
  return out;
}

// Consumer `index`'s share of `epochs` epochs of `per_epoch` batches, in order.
std::vector<Position> Share(int index, int consumers, int64_t per_epoch, int64_t epochs = 2) {
  std::vector<Position> out;
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t i = index; i < per_epoch; i += consumers) out.emplace_back(e, i);
  }
  return out;
}

TEST_CASE("ThreeConsumersInLockstepGetEqualFullBatchesWithEveryRecordOncePerEpoch") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  struct Mode {
    std::optional<v1::EqualShares> asked;
    std::string job;
    int64_t job_batches;  // per epoch: 13 full batches rounded to a multiple of 3
  };
  for (const Mode& mode : {Mode{std::nullopt, "drop", 12}, Mode{v1::EQUAL_SHARES_PAD, "pad", 15}}) {
    INFO(mode.job);
    const std::vector<v1::StreamRequest> requests = AllOf(mode.job, 3, mode.asked);
    v1::StreamPlan plan;
    REQUIRE(Describe(server.address(), requests[1], &plan).ok());
    CHECK(plan.num_consumers() == 3);
    CHECK(plan.records_per_epoch() == kIdShardRecords);
    CHECK(plan.batches_per_epoch() == mode.job_batches / 3);

    const std::vector<Raw> got = ReadTogether(server.address(), requests);
    // Per epoch, the real samples of all consumers.
    std::vector<std::multiset<int32_t>> real(2);
    for (int c = 0; c < 3; ++c) {
      INFO("consumer " << c);
      const Raw& raw = got[static_cast<size_t>(c)];
      INFO(raw.status.error_message());
      REQUIRE(raw.status.ok());
      CHECK(Positions(raw.batches) == Share(c, 3, mode.job_batches));
      for (const v1::Batch& b : raw.batches) {
        REQUIRE(b.shape_size() == 4);
        CHECK(b.shape(0) == 4);
        REQUIRE(b.labels_size() == 4);
        REQUIRE(b.record_files_size() == 4);
        for (int i = 0; i < 4; ++i) {
          if (b.valid_size() > 0 && !b.valid(i)) continue;
          CHECK(b.labels(i) == kIdShardFirstId[b.record_files(i)] + b.record_indexes(i));
          real[static_cast<size_t>(b.position().epoch())].insert(b.labels(i));
        }
      }
    }
    for (const std::multiset<int32_t>& epoch : real) {
      const std::vector<int32_t> labels(epoch.begin(), epoch.end());
      if (mode.job == "pad") {
        CHECK(labels == testing::Iota(kIdShardRecords));  // every record exactly once
      } else {
        CHECK(labels.size() == 12 * 4);
        CHECK(std::set<int32_t>(labels.begin(), labels.end()).size() == labels.size());
      }
    }
    // The second epoch is another order.
    std::vector<int32_t> first, second;
    for (const v1::Batch& b : got[0].batches) {
      (b.position().epoch() == 0 ? first : second).push_back(b.labels(0));
    }
    CHECK(first != second);
  }
  // The runs linger: their counts are the job's, the drops those of 2 epochs of 52 - 48.
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->jobs_size() == 2);
  for (const v1::JobStats& j : stats->jobs()) {
    INFO(j.name());
    CHECK(j.num_consumers() == 3);
    CHECK(j.dropped_records() == (j.name() == "drop" ? 8u : 0u));
    CHECK(j.padded_samples() == (j.name() == "pad" ? 2u * (15 * 4 - kIdShardRecords) : 0u));
  }
  CHECK(FetchMetrics(server).find("sluice_job_num_consumers{dataset=\"train\",job=\"drop\"} 3\n") !=
        std::string::npos);
}

TEST_CASE("MoreConsumersThanTheJobsBatchPoolAllGetTheirShares") {
  TempDir dir;
  // A server budget for one job only: the consumers' streams start together (on the server's
  // start threads) and must all join one start of the run, never start a second pipeline.
  ServerProcess server({"--config", WriteDataset(dir, 60, 100000000)});
  REQUIRE(server.running());
  // Batches of 2: 26 full per epoch, 24 for 8 consumers; the pool holds prefetch (2) + 4.
  std::vector<v1::StreamRequest> requests = AllOf("many", 8);
  for (v1::StreamRequest& r : requests) r.set_batch_size(2);
  const std::vector<Raw> got = ReadTogether(server.address(), requests);
  for (int c = 0; c < 8; ++c) {
    INFO("consumer " << c << ": " << got[c].status.error_message());
    REQUIRE(got[c].status.ok());
    CHECK(Positions(got[c].batches) == Share(c, 8, 24));
  }
}

TEST_CASE("ARunNamedByItsStartEpochIsThatEpochOfARunFromZero") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  const std::vector<Raw> from_zero = ReadTogether(server.address(), AllOf("epochs", 3));
  // The run from 0 still lingers; the run from epoch 1 is another.
  std::vector<v1::StreamRequest> later = AllOf("epochs", 3);
  for (v1::StreamRequest& r : later) r.mutable_start_position()->set_epoch(1);
  const std::vector<Raw> from_one = ReadTogether(server.address(), later);
  for (int c = 0; c < 3; ++c) {
    INFO("consumer " << c);
    const Raw& zero = from_zero[static_cast<size_t>(c)];
    const Raw& one = from_one[static_cast<size_t>(c)];
    REQUIRE(zero.status.ok());
    REQUIRE(one.status.ok());
    std::vector<v1::Batch> epoch_one;
    for (const v1::Batch& b : zero.batches) {
      if (b.position().epoch() == 1) epoch_one.push_back(b);
    }
    REQUIRE(one.batches.size() == epoch_one.size());
    REQUIRE(one.batches.size() == 4);
    for (size_t i = 0; i < epoch_one.size(); ++i) {
      // Same position, samples, record ids and pixels.
      CHECK(google::protobuf::util::MessageDifferencer::Equals(one.batches[i], epoch_one[i]));
    }
  }
  // Both runs, told apart by their start epochs, in GetStats and /metrics.
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->jobs_size() == 2);
  std::set<int64_t> starts;
  for (const v1::JobStats& j : stats->jobs()) starts.insert(j.start_epoch());
  CHECK(starts == std::set<int64_t>{0, 1});
  const std::string metrics = FetchMetrics(server);
  CHECK(metrics.find("sluice_job_num_consumers{dataset=\"train\",job=\"epochs\"} 3\n") !=
        std::string::npos);
  CHECK(metrics.find("sluice_job_num_consumers{dataset=\"train\",job=\"epochs\",start_epoch="
                     "\"1\"} 3\n") != std::string::npos);
}

TEST_CASE("AConsumerThatReconnectsContinuesItsShareLosingAtMostTheBatchBeingWritten") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  // Batches of 4 at 160x160 (300 KiB), over the 64 KiB window: the server writes a batch only
  // as the client reads it, so the cut stream has at most one batch in flight.
  std::vector<v1::StreamRequest> requests = AllOf("again", 3);
  for (v1::StreamRequest& r : requests) r.set_image_height(160);
  std::vector<Raw> others(3);
  std::vector<std::thread> threads;
  for (int c : {0, 2}) {
    threads.emplace_back([&, c] { others[c] = ReadRaw(server.address(), requests[c]); });
  }
  const Raw cut = ReadRaw(server.address(), requests[1], 3);
  const Raw rest = ReadRaw(server.address(), requests[1]);
  for (std::thread& t : threads) t.join();
  for (int c : {0, 2}) {
    INFO("consumer " << c << ": " << others[c].status.error_message());
    REQUIRE(others[c].status.ok());
    CHECK(Positions(others[c].batches) == Share(c, 3, 12));
  }
  CHECK(cut.status.error_code() == grpc::StatusCode::CANCELLED);
  REQUIRE(cut.batches.size() == 3);
  INFO(rest.status.error_message());
  REQUIRE(rest.status.ok());
  // Nothing repeated, nothing lost but the batch the server was writing when the stream went
  // (written to the old stream, so gone with it) — or none, when it had none in flight.
  const std::vector<Position> share = Share(1, 3, 12);
  CHECK(Positions(cut.batches) == std::vector<Position>(share.begin(), share.begin() + 3));
  const std::vector<Position> after = Positions(rest.batches);
  const size_t lost = share.size() - 3 - after.size();
  INFO("lost " << lost);
  CHECK(lost <= 1);
  CHECK(after == std::vector<Position>(share.begin() + 3 + static_cast<long>(lost), share.end()));
}

TEST_CASE("AStreamUnderAnIndexThatIsStreamingTakesItOverAndTheOldEndsAborted") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  // Batches of 300 KiB, over the 64 KiB window: the old stream, not reading, has at most one
  // batch in flight when the new one attaches.
  std::vector<v1::StreamRequest> requests = AllOf("over", 2);
  for (v1::StreamRequest& r : requests) r.set_image_height(160);
  Raw second;
  std::thread other([&] { second = ReadRaw(server.address(), requests[1]); });
  // The old stream reads two batches and waits until the new one has attached; it then reads
  // on and sees what was written to it, then ABORTED.
  auto stub = Stub(server.address());
  grpc::ClientContext context;
  auto reader = stub->StreamBatches(&context, requests[0]);
  std::vector<v1::Batch> old;
  v1::Batch b;
  while (old.size() < 2 && reader->Read(&b)) old.push_back(b);
  REQUIRE(old.size() == 2);
  Raw taker;
  std::thread take([&] { taker = ReadRaw(server.address(), requests[0]); });
  // The new one attached: the old, the new and the other stream are attached; or one of the
  // three has left since the new one opened, which the old one (not reading, so index 0 stalls
  // the job) does only when the new one's Attach ended it at once (it was waiting), and the
  // other only when the new one has read on.
  StatsWhen(*Connect(server.address()), "train", [](const v1::Stats& s) {
    const v1::DatasetStats& d = s.datasets(0);
    return (s.jobs_size() == 1 && s.jobs(0).consumers() == 3) ||
           (d.streams_started() == 3 && d.active_streams() < 3);
  });
  while (reader->Read(&b)) old.push_back(b);
  const grpc::Status ended = reader->Finish();
  take.join();
  other.join();
  INFO(ended.error_message());
  CHECK(ended.error_code() == grpc::StatusCode::ABORTED);
  CHECK(ended.error_message() ==
        "job 'over': another stream took over consumer_index 0 of its 2 consumers; this one ends");
  REQUIRE(taker.status.ok());
  REQUIRE(second.status.ok());
  // Consumer 0's share, each batch once, between the two streams.
  std::vector<Position> both = Positions(old);
  const std::vector<Position> rest = Positions(taker.batches);
  both.insert(both.end(), rest.begin(), rest.end());
  CHECK(both == Share(0, 2, 12));
  CHECK(Positions(second.batches) == Share(1, 2, 12));
}

TEST_CASE("AConsumerAwayForJobLingerSecondsEndsTheJobForAllWithAborted") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 1)});
  REQUIRE(server.running());
  SECTION("never attached") {
    const std::vector<v1::StreamRequest> all = AllOf("absent", 3);
    const std::vector<Raw> got = ReadTogether(server.address(), {all[0], all[1]});
    for (const Raw& raw : got) {
      INFO(raw.status.error_message());
      CHECK(raw.status.error_code() == grpc::StatusCode::ABORTED);
      CHECK(raw.status.error_message() ==
            "job 'absent' of dataset 'train' (its run from epoch 0): consumer_index 2 of its 3 "
            "consumers was away for 1 s (job_linger_seconds; it never attached), so the job "
            "ends for all its consumers");
    }
  }
  SECTION("left after a batch") {
    // Batches of 300 KiB, over the 64 KiB window: the server has taken at most one more batch
    // for the consumer that leaves after reading one.
    std::vector<v1::StreamRequest> all = AllOf("left", 3);
    for (v1::StreamRequest& r : all) r.set_image_height(160);
    std::vector<Raw> got(2);
    std::vector<std::thread> threads;
    for (size_t c = 0; c < 2; ++c) {
      threads.emplace_back([&, c] { got[c] = ReadRaw(server.address(), all[c]); });
    }
    const Raw gone = ReadRaw(server.address(), all[2], 1);
    for (std::thread& t : threads) t.join();
    REQUIRE(gone.batches.size() == 1);
    for (const Raw& raw : got) {
      const std::string m = raw.status.error_message();
      INFO(m);
      CHECK(raw.status.error_code() == grpc::StatusCode::ABORTED);
      CHECK(m.find("consumer_index 2 of its 3 consumers was away for 1 s") != std::string::npos);
      // Where it stopped: the last batch written to it, the one it read or the next of its own.
      const std::string after = "it left after batch (epoch 0, index ";
      const size_t at = m.find(after);
      REQUIRE(at != std::string::npos);
      const int index = std::stoi(m.substr(at + after.size()));
      CHECK((index == 2 || index == 5));
    }
    // The ended run left the registry: a new one of the name starts, with other consumers.
    const Raw again = ReadRaw(server.address(), Lockstep("left", 0, 1));
    INFO(again.status.error_message());
    CHECK(again.status.ok());
    CHECK(again.batches.size() == 2 * 13);
  }
}

TEST_CASE("AConsumerAwayAtThePipelinesEndStillEndsTheJobAbortedForThoseNotYetEnded") {
  TempDir dir;
  // Consumer 0 must read to its end within the linger, counted from consumer 2's leaving.
  ServerProcess server({"--config", WriteDataset(dir, 3)});
  REQUIRE(server.running());
  // Batches of 300 KiB, over the 64 KiB window: a consumer that stops reading has one batch in
  // flight and the rest held. 8 batches for each of 3 consumers.
  std::vector<v1::StreamRequest> all = AllOf("ended", 3);
  for (v1::StreamRequest& r : all) r.set_image_height(160);
  // Consumer 1 reads 6 and waits; consumer 2 reads 7 and leaves; consumer 0 reads to its end,
  // which the pipeline reaches with consumer 1's last batches and consumer 2's last held.
  Raw done, gone;
  std::thread reader([&] { done = ReadRaw(server.address(), all[0]); });
  std::thread leaver([&] { gone = ReadRaw(server.address(), all[2], 7); });
  auto stub = Stub(server.address());
  grpc::ClientContext context;
  auto waiting = stub->StreamBatches(&context, all[1]);
  std::vector<v1::Batch> first;
  v1::Batch b;
  while (first.size() < 6 && waiting->Read(&b)) first.push_back(b);
  REQUIRE(first.size() == 6);
  reader.join();
  leaver.join();
  REQUIRE(gone.batches.size() == 7);
  INFO(done.status.error_message());
  REQUIRE(done.status.ok());
  CHECK(Positions(done.batches) == Share(0, 3, 12));
  // Consumer 2's last batch waits for it, unseen, while consumer 1 is still to end: after
  // job_linger_seconds the job ends ABORTED and leaves the registry.
  StatsWhen(*Connect(server.address()), "train",
            [](const v1::Stats& s) { return s.jobs_size() == 0; });
  std::vector<v1::Batch> rest;
  while (waiting->Read(&b)) rest.push_back(b);
  const grpc::Status ended = waiting->Finish();
  INFO(ended.error_message());
  CHECK(ended.error_code() == grpc::StatusCode::ABORTED);
  CHECK(ended.error_message().find("consumer_index 2 of its 3 consumers was away for 3 s") !=
        std::string::npos);
  CHECK(rest.size() < 2);  // at most the batch in flight; never its share's count
}

TEST_CASE("LockstepRequestsThatCannotJoinAreRefusedNamingTheField") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  // A run of two consumers; one reads a batch and stays.
  auto stub = Stub(server.address());
  grpc::ClientContext context;
  auto reader = stub->StreamBatches(&context, Lockstep("pair", 0, 2));
  v1::Batch b;
  REQUIRE(reader->Read(&b));

  v1::StreamRequest three = Lockstep("pair", 2, 3);
  v1::StreamRequest off = Lockstep("pair", 1, 2, v1::EQUAL_SHARES_OFF);
  v1::StreamRequest outside = Lockstep("pair", 2, 2);
  v1::StreamRequest unnamed = Lockstep("", 0, 2);
  v1::StreamRequest mid_epoch = Lockstep("pair", 1, 2);
  mid_epoch.mutable_start_position()->set_index(3);
  // 52 records make 3 full batches of 16, fewer than 4 consumers.
  v1::StreamRequest too_few = Lockstep("few", 0, 4);
  too_few.set_batch_size(16);
  struct Case {
    v1::StreamRequest request;
    grpc::StatusCode code;
    std::string names;
    bool described;  // DescribeStream refuses it too (a run's consumers are StreamBatches')
  };
  for (const Case& c :
       {Case{three, grpc::StatusCode::INVALID_ARGUMENT,
             "job 'pair' of dataset 'train' runs with num_consumers 2; this stream gives 3", false},
        Case{off, grpc::StatusCode::INVALID_ARGUMENT, "num_consumers 2 with equal_shares OFF",
             true},
        Case{outside, grpc::StatusCode::INVALID_ARGUMENT,
             "consumer_index 2 is outside [0, 2) (num_consumers)", true},
        Case{unnamed, grpc::StatusCode::INVALID_ARGUMENT, "num_consumers 2 needs a job_name", true},
        Case{mid_epoch, grpc::StatusCode::INVALID_ARGUMENT, "start_position.index 3", true},
        Case{too_few, grpc::StatusCode::FAILED_PRECONDITION,
             "an epoch of the job holds 52 records, 3 full batches of batch_size 16, fewer than "
             "its 4 consumers",
             true}}) {
    const Raw streamed = ReadRaw(server.address(), c.request);
    INFO(streamed.status.error_message());
    CHECK(streamed.status.error_code() == c.code);
    CHECK(streamed.status.error_message().find(c.names) != std::string::npos);
    CHECK(streamed.batches.empty());
    if (c.described) {
      v1::StreamPlan plan;
      const grpc::Status described = Describe(server.address(), c.request, &plan);
      INFO(described.error_message());
      CHECK(described.error_code() == c.code);
      CHECK(described.error_message().find(c.names) != std::string::npos);
    }
  }
  context.TryCancel();
  (void)reader->Finish();
}

TEST_CASE("TheCppClientStreamsAJobInLockstepThroughSharedMemory") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  std::vector<serve_testing::Got> got(2);
  std::vector<int64_t> shared(2);
  std::vector<std::thread> threads;
  for (int c = 0; c < 2; ++c) {
    threads.emplace_back([&, c] {
      auto client = Connect(server.address());
      Result<std::unique_ptr<BatchStream>> s = client->Stream(Lockstep("cpp", c, 2));
      if (!s.ok()) {
        got[c].status = s.status();
        return;
      }
      got[c] = serve_testing::ReadAll(**s);
      shared[c] = (*s)->shared_memory_batches();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int c = 0; c < 2; ++c) {
    INFO("consumer " << c << ": " << got[c].status.ToString());
    REQUIRE(got[c].status.ok());
    std::vector<Position> positions;
    for (const BatchMeta& m : got[c].metas) positions.emplace_back(m.epoch, m.index);
    CHECK(positions == Share(c, 2, 12));
    CHECK(shared[c] == 12);
  }
}

// A TCP relay to the server whose connections the test cuts, as a network does: Hold() keeps
// reading what the server sends without passing it on (the server counts it written), Cut()
// closes every connection, losing what was kept. Connections made later relay as usual.
class CutRelay {
 public:
  explicit CutRelay(int server_port) : server_port_(server_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in addr = Loopback(0);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listener_, 8) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~CutRelay() {
    ::shutdown(listener_, SHUT_RDWR);  // Accept returns
    acceptor_.join();
    Cut();
    for (std::thread& t : threads_) t.join();
    ::close(listener_);
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : closed_) ::close(fd);
  }
  const std::string& address() const { return address_; }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  // Whether `bytes` from the server were kept back within 60 s.
  bool WaitHeld(size_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return held_ >= bytes; });
  }
  // Lets `after` connections more through, then closes the next `n` as soon as they are made,
  // before any byte is relayed.
  void Refuse(int after, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    pass_ = after;
    refuse_ = n;
  }
  void Cut() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = false;
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);  // wakes the relaying threads
    closed_.insert(closed_.end(), open_.begin(), open_.end());
    open_.clear();
  }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }
  void Accept() {
    for (;;) {
      const int down = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (down < 0) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pass_ > 0) {
          --pass_;
        } else if (refuse_ > 0) {
          --refuse_;
          ::close(down);
          continue;
        }
      }
      const int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr = Loopback(server_port_);
      if (up < 0 || ::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(down);
        if (up >= 0) ::close(up);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      open_.insert(open_.end(), {down, up});
      threads_.emplace_back([this, down, up] { Relay(down, up, false); });
      threads_.emplace_back([this, down, up] { Relay(up, down, true); });
    }
  }
  void Relay(int from, int to, bool from_server) {
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        ::shutdown(to, SHUT_WR);
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (from_server && holding_) {
          held_ += static_cast<size_t>(n);
          cv_.notify_all();
          continue;
        }
      }
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t w = ::send(to, buffer + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
        if (w <= 0) return;
        sent += w;
      }
    }
  }

  const int server_port_;
  int listener_ = -1;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false;   // guarded by mu_
  int pass_ = 0;           // connections to let through before refusing; guarded by mu_
  int refuse_ = 0;         // connections still to refuse; guarded by mu_
  size_t held_ = 0;        // bytes kept back; guarded by mu_
  std::vector<int> open_;  // guarded by mu_
  // Shut down, closed at the end (a relaying thread may still be using the number); guarded
  // by mu_.
  std::vector<int> closed_;
  std::thread acceptor_;
  std::vector<std::thread> threads_;  // relaying, started by Accept; guarded by mu_ until it ends
};

TEST_CASE("TheCppClientEndsALockstepStreamWhoseReconnectLostBatchesWithDataLoss") {
  TempDir dir;
  // Consumer 0 leaves with DATA_LOSS; the job holds its batches still to come, and consumer 1
  // may wait on them (when the cut lost too few for the held ones to fit the job's bound) until
  // the 3 s linger ends the job ABORTED: bounded either way.
  ServerProcess server({"--config", WriteDataset(dir, 3)});
  REQUIRE(server.running());
  const std::string& address = server.address();
  CutRelay relay(std::stoi(address.substr(address.rfind(':') + 1)));
  ClientOptions options;
  options.targets = {relay.address()};
  options.shared_memory = false;  // over the socket, through the relay
  options.reconnect_deadline = std::chrono::milliseconds(30000);
  auto client = Client::Create(options);
  REQUIRE(client.ok());
  auto stream = (*client)->Stream(Lockstep("cutcpp", 0, 2));
  REQUIRE(stream.ok());
  ReceivedBatch batch;
  bool end = false;
  for (int i = 0; i < 2; ++i) REQUIRE(((*stream)->Next(&batch, &end).ok() && !end));
  // Consumer 1 is not there yet, so the job has made few batches: what the server writes to
  // consumer 0 from here on is kept back by the relay and lost at the cut.
  relay.Hold();
  Raw other;
  std::thread reader([&] { other = ReadRaw(address, Lockstep("cutcpp", 1, 2)); });
  REQUIRE(relay.WaitHeld(3 * 4 * 32 * 32 * 3));
  relay.Cut();
  Status s;
  while ((s = (*stream)->Next(&batch, &end)).ok() && !end) {
  }
  reader.join();
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("consumer_index 0 of 2 of job 'cutcpp': its batches (epoch ") !=
        std::string::npos);
  CHECK(s.message().find("were written to a connection that went") != std::string::npos);
  CHECK((*stream)->reconnects() >= 1);
  INFO(other.status.error_message());
  if (other.status.ok()) {
    CHECK(Positions(other.batches) == Share(1, 2, 12));
  } else {
    CHECK(other.status.error_code() == grpc::StatusCode::ABORTED);
    CHECK(other.status.error_message().find("consumer_index 0 of its 2 consumers was away") !=
          std::string::npos);
  }
}

TEST_CASE(
    "ALockstepConsumerRejoiningARunningJobAfterAFailedFirstConnectTakesItsFirstBatchAsItComes") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  const std::string& address = server.address();
  // Consumer 0 of 2 takes 3 batches and goes (a trainer that died); consumer 1 reads along.
  Raw before, other;
  std::thread reader([&] { other = ReadRaw(address, Lockstep("rejoin", 1, 2)); });
  before = ReadRaw(address, Lockstep("rejoin", 0, 2), 3);
  REQUIRE(before.batches.size() == 3);
  // Its restart's first connection fails before any batch; the reconnect joins the job where
  // it is, after the batches taken before (and any that were in flight when it went).
  CutRelay relay(std::stoi(address.substr(address.rfind(':') + 1)));
  // The client's first connection is Stream()'s fleet check (ListDatasets, waiting for ready);
  // the stream's own channel makes the second.
  relay.Refuse(1, 1);
  ClientOptions options;
  options.targets = {relay.address()};
  options.shared_memory = false;
  options.reconnect_deadline = std::chrono::milliseconds(30000);
  auto client = Client::Create(options);
  REQUIRE(client.ok());
  auto stream = (*client)->Stream(Lockstep("rejoin", 0, 2));
  INFO((stream.ok() ? Status::OK() : stream.status()).ToString());
  REQUIRE(stream.ok());
  std::vector<Position> got;
  ReceivedBatch batch;
  bool end = false;
  Status s;
  while ((s = (*stream)->Next(&batch, &end)).ok() && !end) {
    got.emplace_back(batch.meta.epoch, batch.meta.index);
  }
  reader.join();
  INFO(s.ToString());
  REQUIRE(s.ok());  // no DATA_LOSS for the positions before it joined
  CHECK((*stream)->reconnects() >= 1);
  const std::vector<Position> share = Share(0, 2, 12);
  REQUIRE(!got.empty());
  CHECK(got.front() >= Position(0, 6));
  const auto from = std::find(share.begin(), share.end(), got.front());
  REQUIRE(from != share.end());
  CHECK(got == std::vector<Position>(from, share.end()));
  REQUIRE(other.status.ok());
  CHECK(Positions(other.batches) == Share(1, 2, 12));
}

TEST_CASE("ProfileTargetJoinsAJobInLockstepUnderItsIndex") {
  TempDir dir;
  ServerProcess server({"--config", WriteDataset(dir, 60)});
  REQUIRE(server.running());
  const std::string args = "profile --target " + server.address() +
                           " --dataset train --job-name prof --batches 4 --warmup-batches 0";
  auto alone = testing::RunSluice(args + " --num-consumers 1 --consumer-index 0");
  INFO(alone.err);
  CHECK(alone.exit_code == 0);
  auto stats = Connect(server.address())->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->jobs_size() == 1);
  CHECK(stats->jobs(0).num_consumers() == 1);
  auto outside = testing::RunSluice(args + " --num-consumers 2 --consumer-index 3");
  CHECK(outside.exit_code == 1);
  CHECK(outside.err.find("consumer_index 3 is outside [0, 2) (num_consumers)") !=
        std::string::npos);
}

}  // namespace
}  // namespace sluice

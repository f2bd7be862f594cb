// `sluice serve` streams end to end: the same batches as the in-process pipeline, jobs shared by
// consumers, shards, fan-in from two servers, concurrent streams and consumers that stop reading.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "pipeline/pipeline.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::EachLabelOnce;
using serve_testing::Fixture;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using testing::ServerProcess;
using testing::StderrCapture;
using testing::TempDir;
using testing::WriteTestShards;

TEST_CASE("StreamedBatchesEqualTheInProcessPipelineForTheSameSeed") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto stream = client->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  REQUIRE(got.status.ok());

  v1::PipelineOptions o;
  o.add_files(f.dir.file("shard-*.tfrecord"));
  o.set_batch_size(8);
  o.set_image_height(32);
  o.set_image_width(40);
  o.set_threads(2);
  o.set_seed(7);
  o.set_epochs(1);
  o.set_memory_budget_bytes(64 << 20);
  o.mutable_shuffle()->set_buffer_size(16);
  auto expected = testing::RunToEnd(o);
  REQUIRE(expected.status.ok());
  REQUIRE(got.metas.size() == expected.positions.size());
  for (size_t i = 0; i < got.metas.size(); ++i) {
    CHECK(got.metas[i].epoch == expected.positions[i].epoch);
    CHECK(got.metas[i].index == expected.positions[i].index);
    CHECK(got.metas[i].end_record == expected.positions[i].end_record);
    CHECK(got.metas[i].height == 32);
    CHECK(got.metas[i].width == 40);
  }
  CHECK(got.labels == expected.labels_by_epoch[0]);
  CHECK(got.images == expected.image_bytes);
}

TEST_CASE("TwoConsumersOfOneJobGetDisjointBatchesCoveringTheEpoch") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto r = Request();
  r.set_job_name("shared");
  auto a = client->Stream(r);
  REQUIRE(a.ok());
  auto b = client->Stream(r);
  REQUIRE(b.ok());
  Got ga, gb;
  std::thread ta([&] { ga = ReadAll(**a); });
  std::thread tb([&] { gb = ReadAll(**b); });
  ta.join();
  tb.join();
  REQUIRE(ga.status.ok());
  REQUIRE(gb.status.ok());
  // Which consumer gets how many depends on timing (the first may even take them all before the
  // second joins); that each batch goes to exactly one of them does not.
  std::set<int64_t> ia, ib;
  for (auto& m : ga.metas) ia.insert(m.index);
  for (auto& m : gb.metas) ib.insert(m.index);
  for (int64_t i : ia) CHECK(ib.count(i) == 0);
  CHECK(ia.size() + ib.size() == 20);
  std::vector<int32_t> all = ga.labels;
  all.insert(all.end(), gb.labels.begin(), gb.labels.end());
  CHECK(EachLabelOnce(all, 160));
}

TEST_CASE("ConsumerThatStopsReadingLeavesTheSharedJobToTheOthers") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto r = Request();
  r.set_job_name("busy");
  r.set_epochs(0);
  r.set_batch_size(32);  // 4.8 MB batches: a stalled consumer's buffers fill after a few
  r.set_image_height(224);
  r.set_image_width(224);
  auto a = client->Stream(r);
  REQUIRE(a.ok());
  Got ga = ReadAll(**a, 2);
  REQUIRE(ga.status.ok());
  // a stops reading but stays connected; b must still be served, with other batches.
  auto b = client->Stream(r);
  REQUIRE(b.ok());
  Got gb = ReadAll(**b, 6);
  REQUIRE(gb.status.ok());
  REQUIRE(gb.metas.size() == 6);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (auto& m : ga.metas) seen.insert({m.epoch, m.index});
  for (auto& m : gb.metas) CHECK(seen.insert({m.epoch, m.index}).second);
}

TEST_CASE("ShardRequestsPartitionTheData") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  std::vector<int32_t> all;
  for (int i = 0; i < 2; ++i) {
    auto r = Request();
    r.mutable_shard()->set_index(i);
    r.mutable_shard()->set_count(2);
    auto s = client->Stream(r);
    REQUIRE(s.ok());
    Got g = ReadAll(**s);
    REQUIRE(g.status.ok());
    CHECK(g.labels.size() == 80);
    all.insert(all.end(), g.labels.begin(), g.labels.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  CHECK(all.size() == 160);
}

TEST_CASE("FanInFromTwoServersDeliversEachServersShardOnce") {
  // Two workers started from one configuration with --shard 0/2 and 1/2, as a StatefulSet's
  // pods would be.
  Fixture f(4, 30);
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<ServerProcess>(
        std::vector<std::string>{"--config", f.config, "--shard", std::to_string(i) + "/2"}));
    REQUIRE(servers.back()->running());
    // Each says which part it serves, so a client can tell a fleet it reaches only part of.
    auto one = Connect(servers.back()->address());
    auto infos = one->ListDatasets();
    REQUIRE(infos.ok());
    REQUIRE(infos->size() == 1);
    CHECK(infos->front().shard_index() == i);
    CHECK(infos->front().shard_count() == 2);
  }
  ClientOptions o;
  // One plain target and one through the dns: resolver (a literal resolves to itself).
  o.targets = {servers[0]->address(), "dns:///" + servers[1]->address()};
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  // One consumer of every server's part (training's default, DROP, included): a server's own
  // --shard is not balanced against the others', so nothing of either part is dropped.
  auto s = (*client)->Stream(Request());
  REQUIRE(s.ok());
  CHECK((*s)->servers() == 2);
  std::vector<int32_t> labels;
  std::set<int> from;
  for (;;) {
    ReceivedBatch b;
    bool end = false;
    REQUIRE((*s)->Next(&b, &end).ok());
    if (end) break;
    from.insert(b.server);
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  }
  CHECK(from == std::set<int>{0, 1});
  CHECK(EachLabelOnce(labels, 120));
}

// Two workers of one fleet, `--shard 0/2` and `--shard 1/2`, serving f's dataset.
std::vector<std::unique_ptr<ServerProcess>> ShardedFleet(const Fixture& f) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<ServerProcess>(
        std::vector<std::string>{"--config", f.config, "--shard", std::to_string(i) + "/2"}));
    REQUIRE(servers.back()->running());
  }
  return servers;
}

Result<std::unique_ptr<BatchStream>> StreamFrom(std::vector<std::string> targets,
                                                bool allow_partial_fleet = false) {
  ClientOptions o;
  o.targets = std::move(targets);
  o.reconnect_deadline = std::chrono::milliseconds(3000);
  o.allow_partial_fleet = allow_partial_fleet;
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  return (*client)->Stream(Request());
}

TEST_CASE("ClientReachingOneShardOfTwoFailsNamingTheMissingShard") {
  Fixture f(4, 30);
  auto servers = ShardedFleet(f);
  const std::string first = servers[0]->address();
  auto s = StreamFrom({first});
  REQUIRE(!s.ok());
  INFO(s.status().ToString());
  CHECK(s.status().code() == StatusCode::kFailedPrecondition);
  CHECK(s.status().message().find(first + " serves shard 0 of 2 of 'train'") != std::string::npos);
  CHECK(s.status().message().find("no target serves shard 1") != std::string::npos);
  // Nothing was streamed: the check comes before any stream starts.
  auto stats = Connect(first)->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->datasets_size() == 1);
  CHECK(stats->datasets(0).streams_started() == 0);

  // Allowed: a warning saying the same, and the half this server serves, each record once.
  StderrCapture err;
  auto partial = StreamFrom({first}, /*allow_partial_fleet=*/true);
  const std::string warning = err.Text();
  REQUIRE(partial.ok());
  CHECK(warning.find("WARNING") != std::string::npos);
  CHECK(warning.find("no target serves shard 1") != std::string::npos);
  Got g = ReadAll(**partial);
  REQUIRE(g.status.ok());
  CHECK(g.labels.size() == 60);
  CHECK(std::set<int32_t>(g.labels.begin(), g.labels.end()).size() == 60);
}

// f's configuration with the dataset's own pipeline shard {index, count}: how that one server
// reads the files, not a part of a fleet.
void ShardTheConfig(const Fixture& f, int index, int count) {
  std::string text = testing::ReadAll(f.config);
  const std::string at = "    epochs: 1\n";
  REQUIRE(text.find(at) != std::string::npos);
  text.replace(text.find(at), at.size(),
               at + "    shard { index: " + std::to_string(index) +
                   " count: " + std::to_string(count) + " }\n");
  testing::WriteAll(f.config, text);
}

TEST_CASE("AServerWhoseConfigShardsItsDatasetIsNoFleet") {
  Fixture f(4, 30);
  ShardTheConfig(f, 1, 2);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto infos = Connect(server.address())->ListDatasets();
  REQUIRE(infos.ok());
  REQUIRE(infos->size() == 1);
  CHECK(infos->front().shard_count() == 0);
  // A client of it alone reads all it serves: files 1 and 3, no fleet check refusing it.
  auto s = StreamFrom({server.address()});
  REQUIRE(s.ok());
  Got g = ReadAll(**s);
  REQUIRE(g.status.ok());
  CHECK(g.labels.size() == 60);
  CHECK(std::set<int32_t>(g.labels.begin(), g.labels.end()).size() == 60);
}

TEST_CASE("AFleetOverAConfigShardReportsOnlyTheFleetPart") {
  Fixture f(4, 30);
  ShardTheConfig(f, 1, 2);
  auto servers = ShardedFleet(f);  // pipeline shards {1, 4} and {3, 4}
  for (int i = 0; i < 2; ++i) {
    auto infos = Connect(servers[i]->address())->ListDatasets();
    REQUIRE(infos.ok());
    REQUIRE(infos->size() == 1);
    CHECK(infos->front().shard_index() == i);
    CHECK(infos->front().shard_count() == 2);
  }
  auto both = StreamFrom({servers[0]->address(), servers[1]->address()});
  REQUIRE(both.ok());
  Got g = ReadAll(**both);
  REQUIRE(g.status.ok());
  CHECK(g.labels.size() == 60);
  CHECK(std::set<int32_t>(g.labels.begin(), g.labels.end()).size() == 60);
  // Half the fleet is still refused, naming the part it misses.
  auto half = StreamFrom({servers[1]->address()});
  REQUIRE(!half.ok());
  CHECK(half.status().code() == StatusCode::kFailedPrecondition);
  CHECK(half.status().message().find("no target serves shard 0") != std::string::npos);
}

TEST_CASE("TwoTargetsServingTheSameShardFail") {
  Fixture f(4, 30);
  auto servers = ShardedFleet(f);
  const std::string first = servers[0]->address();
  auto s = StreamFrom({first, servers[1]->address(), first});
  REQUIRE(!s.ok());
  INFO(s.status().ToString());
  CHECK(s.status().code() == StatusCode::kFailedPrecondition);
  CHECK(s.status().message().find("shard 0 is served by 2 targets (" + first + ", " + first +
                                  ")") != std::string::npos);
}

TEST_CASE("StreamFromAStoppedServerIsUnavailableNamingItAfterTheReconnectDeadline") {
  // The fleet check asks each target before streaming; a server that is down is waited for as
  // a stream would wait for it, then named.
  Fixture f;
  std::string address;
  {
    ServerProcess server(f.Args());
    REQUIRE(server.running());
    address = server.address();
  }
  ClientOptions o;
  o.targets = {address};
  o.reconnect_deadline = std::chrono::milliseconds(500);
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto s = (*client)->Stream(Request());
  REQUIRE(!s.ok());
  INFO(s.status().ToString());
  CHECK(s.status().code() == StatusCode::kUnavailable);
  CHECK(s.status().message().find(address) != std::string::npos);
}

TEST_CASE("EightConcurrentStreamsAllComplete") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  std::vector<std::thread> threads;
  std::vector<Got> got(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto r = Request();
      r.set_seed(static_cast<uint64_t>(100 + i));
      auto s = client->Stream(r);
      if (!s.ok()) {
        got[static_cast<size_t>(i)].status = s.status();
        return;
      }
      got[static_cast<size_t>(i)] = ReadAll(**s);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& g : got) {
    INFO(g.status.ToString());
    CHECK(g.status.ok());
    CHECK(g.labels.size() == 160);
  }
}

TEST_CASE("ConsumerThatStopsReadingDoesNotGrowServerMemory") {
  // Big enough batches that a growing queue would show: 32 x 224x224x3 = 4.8 MB a batch.
  Fixture f(4, 100);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto r = Request();
  r.set_batch_size(32);
  r.set_image_height(224);
  r.set_image_width(224);
  r.set_epochs(0);
  auto s = client->Stream(r);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  Got first = ReadAll(**s, 3);
  REQUIRE(first.status.ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t settled = server.RssBytes();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const int64_t later = server.RssBytes();
  // The job's budget is 64 MiB; a server that kept producing would grow by ~5 MB per batch.
  CHECK(later < settled + (16 << 20));
  Got more = ReadAll(**s, 3);
  CHECK(more.status.ok());
}

}  // namespace
}  // namespace sluice

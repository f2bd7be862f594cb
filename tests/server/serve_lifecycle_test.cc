// A `sluice serve` process's life: killed and restarted under a streaming client, drained by
// SIGTERM, and refusing to start on a bad shard flag, a port in use or a bad config.
#include <catch2/catch.hpp>

#include <signal.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
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
using testing::TempDir;
using testing::WriteTestShards;

TEST_CASE("ServerKilledMidStreamAndRestartedTheClientResumesWithNothingLostOrRepeated") {
  Fixture f(4, 60);
  // Two epochs, so the resume crosses an epoch boundary too.
  auto r = Request();
  r.set_epochs(2);
  Got whole;
  {
    ServerProcess server(f.Args());
    REQUIRE(server.running());
    auto s = Connect(server.address())->Stream(r);
    REQUIRE(s.ok());
    whole = ReadAll(**s);
    REQUIRE(whole.status.ok());
  }
  auto server = std::make_unique<ServerProcess>(f.Args());
  REQUIRE(server->running());
  const std::string address = server->address();
  ClientOptions o;
  o.targets = {address};
  o.prefetch = 1;
  o.reconnect_deadline = std::chrono::milliseconds(30000);
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto s = (*client)->Stream(r);
  REQUIRE(s.ok());
  Got got = ReadAll(**s, 7);
  REQUIRE(got.status.ok());
  server->Stop(SIGKILL);
  // The same port again (a fresh config listening there).
  std::string config = testing::ReadAll(f.config);
  config.replace(config.find("127.0.0.1:0"), 11, address);
  testing::WriteAll(f.config, config);
  server = std::make_unique<ServerProcess>(f.Args());
  REQUIRE(server->running());
  Got rest = ReadAll(**s);
  REQUIRE(rest.status.ok());
  CHECK((*s)->reconnects() >= 1);
  got.labels.insert(got.labels.end(), rest.labels.begin(), rest.labels.end());
  got.images += rest.images;
  got.metas.insert(got.metas.end(), rest.metas.begin(), rest.metas.end());
  REQUIRE(got.metas.size() == whole.metas.size());
  for (size_t i = 0; i < got.metas.size(); ++i) {
    CHECK(got.metas[i].epoch == whole.metas[i].epoch);
    CHECK(got.metas[i].index == whole.metas[i].index);
  }
  CHECK(got.labels == whole.labels);
  CHECK(got.images == whole.images);
}

TEST_CASE("SigtermDrainsOpenStreamsAndExitsZero") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  ClientOptions o;
  o.targets = {server.address()};
  o.reconnect_deadline = std::chrono::milliseconds(500);
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto r = Request();
  r.set_epochs(0);
  auto s = (*client)->Stream(r);
  REQUIRE(s.ok());
  // A consumer that keeps reading: its write in flight completes, then its stream ends.
  Got got;
  std::thread reader([&] { got = ReadAll(**s); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  CHECK(server.Stop(SIGTERM) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  reader.join();
  CHECK(server.output().find("draining") != std::string::npos);
  INFO(got.status.ToString());
  CHECK(got.status.code() == StatusCode::kUnavailable);
  // Every batch up to the drain arrived, in order.
  REQUIRE(got.metas.size() > 2);
  for (size_t i = 1; i < got.metas.size(); ++i) {
    const auto& a = got.metas[i - 1];
    const auto& b = got.metas[i];
    CHECK(((b.epoch == a.epoch && b.index == a.index + 1) ||
           (b.epoch == a.epoch + 1 && b.index == 0)));
  }
}

TEST_CASE("BadShardFlagStopsStartUp") {
  Fixture f;
  auto r = testing::RunSluice("serve --config " + f.config + " --shard 2/2");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--shard wants I/N") != std::string::npos);
}

TEST_CASE("PortInUseStopsStartUp") {
  Fixture f;
  ServerProcess first(f.Args());
  REQUIRE(first.running());
  std::string config = testing::ReadAll(f.config);
  config.replace(config.find("127.0.0.1:0"), 11, first.address());
  testing::WriteAll(f.dir.file("second.textproto"), config);
  auto r = testing::RunSluice("serve --config " + f.dir.file("second.textproto"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("cannot listen on " + first.address()) != std::string::npos);
}

TEST_CASE("BadConfigStopsStartUpNamingTheField") {
  TempDir dir;
  testing::WriteAll(dir.file("bad.textproto"),
                    "listen: \"127.0.0.1:0\"\ndatasets { nme: \"x\" }\n");
  auto r = testing::RunSluice("serve --config " + dir.file("bad.textproto"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.textproto:2") != std::string::npos);
}

}  // namespace
}  // namespace sluice

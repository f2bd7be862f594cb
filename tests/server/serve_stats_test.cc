// How `sluice serve` describes itself: datasets and stats over gRPC, `sluice profile --target`,
// and metrics and health over HTTP.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

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

TEST_CASE("ListDatasetsAndGetStatsDescribeTheServer") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto datasets = client->ListDatasets();
  REQUIRE(datasets.ok());
  REQUIRE(datasets->size() == 1);
  CHECK((*datasets)[0].name() == "train");
  CHECK((*datasets)[0].files() == 4);
  CHECK((*datasets)[0].num_classes() == 1000);
  CHECK((*datasets)[0].batch_size() == 8);
  auto stream = client->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  REQUIRE(got.status.ok());
  stream->reset();
  auto stats = client->GetStats("train");
  REQUIRE(stats.ok());
  REQUIRE(stats->datasets_size() == 1);
  CHECK(stats->datasets(0).images_served() == 160);
  CHECK(stats->datasets(0).batches_served() == 20);
  CHECK(stats->datasets(0).streams_started() == 1);
}

TEST_CASE("ProfileTargetMeasuresTheServiceFromTheClientSide") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto r = testing::RunSluice("profile --target " + server.address() +
                              " --dataset train --batches 6 --warmup-batches 1 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["batches"] == 6);
  CHECK(j["images_per_sec"].get<double>() > 0);
  CHECK(j["bytes_per_sec"].get<double>() > 0);
  CHECK(j["batch_wait_ms"].contains("p99"));
  CHECK(j["decode_parallelism_max"] == 2);
  CHECK(j["decode_parallelism"].get<int>() >= 1);
  CHECK(j["bottleneck"].contains("stage"));
  bool has_decode = false;
  for (const auto& s : j["stages"]) has_decode |= s["name"] == "decode";
  CHECK(has_decode);
  auto bad = testing::RunSluice("profile --target " + server.address() + " --dataset nope");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("NOT_FOUND") != std::string::npos);
}

TEST_CASE("ProfileTargetOfPartOfAFleetIsRefusedUnlessAllowed") {
  Fixture f(4, 30);
  ServerProcess server({"--config", f.config, "--shard", "0/2"});
  REQUIRE(server.running());
  const std::string args =
      "profile --target " + server.address() + " --dataset train --batches 2 --warmup-batches 0";
  auto refused = testing::RunSluice(args);
  INFO(refused.err);
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("no target serves shard 1") != std::string::npos);
  auto allowed = testing::RunSluice(args + " --allow-partial-fleet");
  INFO(allowed.err);
  CHECK(allowed.exit_code == 0);
  CHECK(allowed.err.find("WARNING") != std::string::npos);
  CHECK(allowed.err.find("no target serves shard 1") != std::string::npos);
}

TEST_CASE("MetricsAndHealthAreServedOverHttp") {
  Fixture f(4, 40, "metrics_address: \"127.0.0.1:0\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto s = Connect(server.address())->Stream(Request());
  REQUIRE(s.ok());
  REQUIRE(ReadAll(**s).status.ok());
  const std::string out = server.output();
  const size_t at = out.find("http://");
  REQUIRE(at != std::string::npos);
  const std::string url = out.substr(at, out.find('\n', at) - at);
  TempDir tmp;
  auto fetch = [&](const std::string& u) {
    std::string cmd = "curl -s -o " + tmp.file("body") + " -w '%{http_code}' '" + u + "' > " +
                      tmp.file("code");
    REQUIRE(std::system(cmd.c_str()) == 0);
    return std::make_pair(testing::ReadAll(tmp.file("code")), testing::ReadAll(tmp.file("body")));
  };
  auto [code, metrics] = fetch(url);
  CHECK(code == "200");
  CHECK(metrics.find("sluice_images_served_total{dataset=\"train\"} 160") != std::string::npos);
  CHECK(metrics.find("# TYPE sluice_active_streams gauge") != std::string::npos);
  CHECK(metrics.find("# TYPE sluice_job_decode_parallelism gauge") != std::string::npos);
  const std::string base = url.substr(0, url.rfind("/metrics"));
  CHECK(fetch(base + "/healthz").first == "200");
  auto [page_code, page] = fetch(base + "/");
  CHECK(page_code == "200");
  CHECK(page.find("train") != std::string::npos);
}

}  // namespace
}  // namespace sluice

// A real `sluice serve` without a configured budget takes half of what the memory limit it finds
// (cgroup or physical memory) leaves after the shared-memory cap, and shows that limit and its
// file on /, /metrics and its start-up line; a budget above a cgroup limit stops it at start, one
// above physical memory gets a warning.
#include <catch2/catch.hpp>
#include <string>

#include "server/format_bytes.h"
#include "server/memory_limit.h"
#include "server/server_config.h"
#include "tests/server/http_test_client.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Fixture;
using testing::HttpGet;
using testing::MetricsPort;
using testing::ServerProcess;

TEST_CASE("UnsetBudgetIsHalfTheMemoryLimitLeftBySharedMemoryAndPagesShowTheLimit") {
  const MemoryLimit limit = DetectMemoryLimit();
  REQUIRE(limit.source != MemoryLimitSource::kUnknown);
  const int64_t budget = DefaultMemoryBudget(limit, DefaultMaxSharedMemory(limit));
  Fixture f(2, 8, "metrics_address: \"127.0.0.1:0\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  const std::string out = server.output();
  INFO(out);
  CHECK(out.find("memory budget " + FormatBytes(budget) + " (memory limit " + limit.ToString() +
                 ")") != std::string::npos);

  const int port = MetricsPort(out);
  REQUIRE(port > 0);
  auto metrics = HttpGet(port, "/metrics");
  REQUIRE(metrics);
  CHECK(metrics->find("sluice_memory_limit_bytes{source=\"" +
                      std::string(MemoryLimitSourceName(limit.source)) + "\",file=\"" + limit.file +
                      "\"}") != std::string::npos);
  CHECK(metrics->find("sluice_memory_budget_bytes " + std::to_string(budget)) != std::string::npos);
  auto page = HttpGet(port, "/");
  REQUIRE(page);
  CHECK(page->find("memory limit " + limit.ToString()) != std::string::npos);
}

TEST_CASE("ConfiguredBudgetOverACgroupLimitStopsTheServerAtStartAndOverMemTotalWarns") {
  const MemoryLimit limit = DetectMemoryLimit();
  REQUIRE(limit.source != MemoryLimitSource::kUnknown);
  Fixture f(2, 8,
            "memory_budget_bytes: " + std::to_string(limit.bytes + (int64_t{1} << 30)) + "\n");
  ServerProcess server(f.Args());
  INFO(limit.ToString() << "\n" << server.output());
  if (limit.source == MemoryLimitSource::kPhysical) {
    REQUIRE(server.running());
    CHECK(server.output().find("warning: memory_budget_bytes") != std::string::npos);
    CHECK(server.Stop(SIGTERM) == 0);
  } else {
    CHECK_FALSE(server.running());
    CHECK(server.Stop(SIGTERM) == 2);
  }
}

}  // namespace
}  // namespace sluice

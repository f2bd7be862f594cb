// Run-time tuning of decode parallelism: the hill-climbing step, the gate it turns, and the
// direction it takes in a running pipeline (never exact timings).
#include "pipeline/autotuner.h"

#include <catch2/catch.hpp>
#include <algorithm>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "pipeline/parallelism_gate.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;
using testing::BaseOptions;
using testing::TempDir;
using testing::WriteTestShards;

constexpr int64_t kMs = 1'000'000;

TEST_CASE("NextDecodeLimitClimbsTowardTheConsumersRate") {
  struct Case {
    const char* what;
    int limit, max;
    AutotuneObservation o;
    int want;
  };
  // interval 150 ms, 6 samples of the queue.
  auto obs = [](int64_t starved_ms, int64_t busy_ms, int full, int empty) {
    AutotuneObservation o;
    o.interval_ns = 150 * kMs;
    o.consumer_starved_ns = starved_ms * kMs;
    o.decode_busy_ns = busy_ms * kMs;
    o.samples = 6;
    o.samples_full = full;
    o.samples_empty = empty;
    return o;
  };
  const Case cases[] = {
      {"consumer waited a little, decode saturated: +1", 2, 8, obs(20, 290, 0, 2), 3},
      {"consumer waited most of the interval: doubled", 2, 8, obs(100, 300, 0, 6), 4},
      {"doubling stops at max", 6, 8, obs(140, 900, 0, 6), 8},
      {"already at max", 8, 8, obs(100, 1200, 0, 6), 8},
      {"consumer waited, decode not saturated (reader-bound): keep", 2, 8, obs(100, 100, 0, 6), 2},
      {"polling consumer (no GetNext waits) found the queue empty: +1", 1, 4, obs(0, 150, 0, 3), 2},
      {"queue full all interval, consumer never waited: -1", 3, 8, obs(0, 50, 6, 0), 2},
      {"never below 1", 1, 8, obs(0, 20, 6, 0), 1},
      {"full but the consumer waited once: keep", 3, 8, obs(5, 50, 6, 0), 3},
      {"full only part of the interval: keep", 3, 8, obs(0, 50, 5, 0), 3},
      {"neither: keep", 3, 8, obs(1, 300, 2, 1), 3},
      {"out-of-range limit is clamped", 12, 8, obs(1, 300, 2, 1), 8},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK(NextDecodeLimit(c.limit, c.max, c.o) == c.want);
  }
  CHECK(NextDecodeLimit(3, 8, AutotuneObservation{}) == 3);  // nothing observed
}

TEST_CASE("GateBoundsTheThreadsInside") {
  ParallelismGate gate(4);
  gate.SetLimit(2);
  CHECK(gate.limit() == 2);
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 30; ++i) {
        GatePass pass(gate);
        int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(most.load() >= 1);
  CHECK(most.load() <= 2);
  gate.SetLimit(0);
  CHECK(gate.limit() == 1);
  gate.SetLimit(99);
  CHECK(gate.limit() == 4);
}

TEST_CASE("RaisingTheLimitLetsAWaiterIn") {
  ParallelismGate gate(2);
  gate.SetLimit(1);
  gate.Acquire();
  auto second = std::async(std::launch::async, [&] {
    GatePass pass(gate);
  });
  CHECK(second.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  gate.SetLimit(2);
  CHECK(second.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  gate.Release();
}

// Consumes batches, sleeping `per_batch` after each, until done(stats) or the deadline.
template <typename Done>
StatsSnapshot ConsumeUntil(Iterator* it, std::chrono::milliseconds per_batch,
                           std::chrono::milliseconds deadline, Done done) {
  const auto start = Clock::now();
  StatsSnapshot s = it->Stats();
  while (!done(s) && Clock::now() - start < deadline) {
    Batch b;
    bool end = false;
    REQUIRE(it->GetNext(&b, &end).ok());
    REQUIRE_FALSE(end);
    b.Release();
    std::this_thread::sleep_for(per_batch);
    s = it->Stats();
  }
  return s;
}

TEST_CASE("SlowConsumerLowersDecodeParallelism") {
  TempDir dir;
  WriteTestShards(dir, 3, 40);
  auto o = BaseOptions(dir);
  o.set_epochs(0);
  o.set_threads(2);
  auto it = testing::StartIterator(o);
  CHECK(it->Stats().decode_parallelism == 2);
  CHECK(it->Stats().decode_parallelism_max == 2);
  // Decoding a batch takes a few milliseconds; the consumer takes 100: the queue stays full.
  StatsSnapshot s = ConsumeUntil(it.get(), std::chrono::milliseconds(100), std::chrono::seconds(6),
                                 [](const StatsSnapshot& s) { return s.decode_parallelism < 2; });
  CHECK(s.decode_parallelism == 1);
  CHECK(s.decode_parallelism_max == 2);
}

TEST_CASE("FastConsumerKeepsEveryDecodeThread") {
  TempDir dir;
  // Larger noisy images so that decode, not reading, is what the consumer waits for.
  WriteTestShards(dir, 2, 24, 320, 240, /*noisy=*/true);
  auto o = BaseOptions(dir);
  o.set_epochs(0);
  o.set_threads(2);
  o.set_image_height(96);
  o.set_image_width(96);
  auto it = testing::StartIterator(o);
  // Run for a while at full speed...
  ConsumeUntil(it.get(), std::chrono::milliseconds(0), std::chrono::milliseconds(1200),
               [](const StatsSnapshot&) { return false; });
  // ...and the limit is at its maximum: a scheduling hiccup of this busy test machine may have
  // stepped it down for a moment, but a consumer that waits sends it back up.
  StatsSnapshot s = ConsumeUntil(it.get(), std::chrono::milliseconds(0), std::chrono::seconds(5),
                                 [](const StatsSnapshot& s) { return s.decode_parallelism == 2; });
  CHECK(s.decode_parallelism == 2);
}

TEST_CASE("NoAutotuneKeepsEveryDecodeThread") {
  TempDir dir;
  WriteTestShards(dir, 3, 40);
  auto o = BaseOptions(dir);
  o.set_epochs(0);
  o.set_threads(2);
  o.set_no_autotune(true);
  auto it = testing::StartIterator(o);
  StatsSnapshot s = ConsumeUntil(it.get(), std::chrono::milliseconds(100),
                                 std::chrono::milliseconds(800),
                                 [](const StatsSnapshot& s) { return s.decode_parallelism < 2; });
  CHECK(s.decode_parallelism == 2);
}

TEST_CASE("TunedRunGivesTheSameBatchesAsOneThread") {
  TempDir dir;
  WriteTestShards(dir, 3, 30);
  auto o = BaseOptions(dir);
  o.set_threads(1);
  auto reference = testing::RunToEnd(o);
  REQUIRE(reference.status.ok());

  o.set_threads(2);
  auto it = testing::StartIterator(o);
  std::string bytes;
  int lowest_limit = 2;
  for (;;) {
    Batch b;
    bool end = false;
    REQUIRE(it->GetNext(&b, &end).ok());
    if (end) break;
    bytes.append(reinterpret_cast<const char*>(b.images().data()), b.images().size());
    b.Release();
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // slow: the limit comes down
    lowest_limit = std::min(lowest_limit, it->Stats().decode_parallelism);
  }
  CHECK(lowest_limit == 1);  // the run did change the decode parallelism
  CHECK(bytes == reference.image_bytes);
}

}  // namespace
}  // namespace sluice

// PrefetchQueue: entries in order; Pop wakes on Push; a stall reported by the pool ends Pop with
// false after about a second, unless an entry arrives first.
#include "pipeline/prefetch_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace sluice {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE("PopWaitsForAPushAndEntriesComeOutInOrder") {
  PipelineStats stats;
  PrefetchQueue queue(&stats);
  int callbacks = 0;
  queue.SetReadyCallback([&] { ++callbacks; });
  std::thread batcher([&] {
    std::this_thread::sleep_for(20ms);
    queue.Push(Ready{Batch(), Status::OK(), false});
    queue.Push(Ready{Batch(), Status::OK(), true});
  });
  Ready r;
  REQUIRE(queue.Pop(&r, [] { return false; }));
  CHECK_FALSE(r.end);
  batcher.join();
  CHECK(stats.queue_fill == 1);
  REQUIRE(queue.TryPop(&r));
  CHECK(r.end);
  CHECK_FALSE(queue.TryPop(&r));
  CHECK(callbacks == 2);
}

TEST_CASE("AStallThatBeginsWhilePopWaitsEndsItAfterASecond") {
  PipelineStats stats;
  PrefetchQueue queue(&stats);
  std::atomic<bool> stalled{false};
  std::thread pool([&] {
    std::this_thread::sleep_for(50ms);
    stalled = true;
    queue.Recheck();  // as BatchPool's on_wait does
  });
  const auto start = Clock::now();
  Ready r;
  CHECK_FALSE(queue.Pop(&r, [&] { return stalled.load(); }));
  const auto waited = Clock::now() - start;
  pool.join();
  CHECK(waited >= 1s);
  CHECK(waited < 5s);
}

TEST_CASE("AnEntryDuringAStallIsDelivered") {
  PipelineStats stats;
  PrefetchQueue queue(&stats);
  std::thread batcher([&] {
    std::this_thread::sleep_for(100ms);
    queue.Push(Ready{Batch(), Status::OK(), true});
  });
  Ready r;
  CHECK(queue.Pop(&r, [] { return true; }));
  CHECK(r.end);
  batcher.join();
}

}  // namespace
}  // namespace sluice

// BatchPool: buffers lent and given back, accounted in their pool; a waiter is announced (for
// the consumer's stall detector), woken by a release, and by Stop.
#include "pipeline/batch_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

namespace sluice {
namespace {

using namespace std::chrono_literals;

ResolvedOptions SmallOptions() {
  ResolvedOptions o;
  o.batch_size = 2;
  o.height = 4;
  o.width = 4;
  o.prefetch = 1;
  return o;
}

TEST_CASE("BuffersAreAccountedWhileLentAndAWaiterIsWokenByARelease") {
  PoolCounters counters;
  std::atomic<int> waits{0};
  BatchPool pool(SmallOptions(), &counters, [&] { ++waits; });
  const int buffers = 1 + kBatchPoolExtra;
  const int64_t buffer_bytes = 2 * 4 * 4 * 3;
  CHECK(counters.limit == buffers * buffer_bytes);
  std::vector<BatchBuffer*> taken;
  for (int i = 0; i < buffers; ++i) taken.push_back(pool.Acquire());
  CHECK(counters.bytes == buffers * buffer_bytes);

  pool.BatchLent();
  std::atomic<BatchBuffer*> got{nullptr};
  std::thread source([&] { got = pool.Acquire(); });
  while (waits.load() == 0) std::this_thread::sleep_for(1ms);
  CHECK(pool.ConsumerHoldsThePool(0));
  CHECK_FALSE(pool.ConsumerHoldsThePool(1));
  pool.Release(taken.back());
  source.join();
  CHECK(got.load() == taken.back());
  CHECK_FALSE(pool.ConsumerHoldsThePool(0));  // nobody waits now
  pool.Detach();
  CHECK(counters.bytes == 0);
}

TEST_CASE("StopWakesAWaitingAcquireWithNoBuffer") {
  PoolCounters counters;
  BatchPool pool(SmallOptions(), &counters, nullptr);
  for (int i = 0; i < 1 + kBatchPoolExtra; ++i) REQUIRE(pool.Acquire() != nullptr);
  std::atomic<int> result{-1};
  std::thread source([&] { result = pool.Acquire() == nullptr ? 0 : 1; });
  std::this_thread::sleep_for(20ms);
  pool.Stop();
  source.join();
  CHECK(result == 0);
}

// With a feature schema every slot holds its record's arrays and reserves slot_bytes() for them,
// so the pool's limit and what a lent buffer counts include them (as ResolveOptions' budget split
// counts them).
TEST_CASE("BuffersHoldAndAccountEachSlotsFeatures") {
  ResolvedOptions o = SmallOptions();
  FeatureColumn ids;
  ids.key = ids.name = "ids";
  o.features.columns.push_back(ids);
  o.features.boxes.enabled = true;
  o.features.max_feature_bytes = 1000;
  REQUIRE(o.features.slot_bytes() == 1000);
  PoolCounters counters;
  BatchPool pool(o, &counters, nullptr);
  const int64_t buffer_bytes = 2 * (4 * 4 * 3 + 1000);
  CHECK(counters.limit == (1 + kBatchPoolExtra) * buffer_bytes);
  BatchBuffer* b = pool.Acquire();
  REQUIRE(b != nullptr);
  CHECK(counters.bytes == buffer_bytes);
  REQUIRE(b->features.size() == 2);
  CHECK(b->features[0].arrays.size() == 3);  // ids, boxes, box_labels
  pool.Release(b);
  pool.Detach();
}

}  // namespace
}  // namespace sluice

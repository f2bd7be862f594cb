// The decoders' share of the budget: an image over the whole share is refused at once, naming
// both numbers; reservations that do not fit together wait for each other and never exceed it.
#include "pipeline/decode_budget.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {
namespace {

TEST_CASE("ReservationOverTheWholeShareIsRefusedNamingBothNumbers") {
  PoolCounters pool;
  DecodeBudget budget(1000, &pool);
  Status s = budget.Reserve(1001);
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("1001") && Catch::Contains("1000"));
  CHECK(pool.bytes == 0);
  CHECK(pool.limit == 1000);
}

// A decoder that asks its gate twice gets Internal (in release builds too), and the second ask
// takes nothing: what the destructor gives back is what the first took.
TEST_CASE("ReservationAskedTwiceIsInternalAndTakesNothingMore") {
  PoolCounters pool;
  DecodeBudget budget(1000, &pool);
  {
    DecodeReservation reservation(&budget);
    REQUIRE(reservation.Reserve(300).ok());
    const Status again = reservation.Reserve(200);
    CHECK(again.code() == StatusCode::kInternal);
    CHECK_THAT(again.message(), Catch::Contains("taken at most once") && Catch::Contains("200") &&
                                    Catch::Contains("300"));
    CHECK(pool.bytes == 300);
  }
  CHECK(pool.bytes == 0);
}

TEST_CASE("ConcurrentReservationsWaitForEachOtherWithinTheShare") {
  PoolCounters pool;
  DecodeBudget budget(1000, &pool);
  std::atomic<int> refused{0};  // Catch's macros are for the test's thread only
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        DecodeReservation r(&budget);
        if (!r.Reserve(300 + 100 * (k % 5)).ok()) ++refused;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(refused == 0);
  CHECK(pool.bytes == 0);
  CHECK(pool.peak > 0);
  CHECK(pool.peak <= 1000);
}

// Before the tickets, a small reservation arriving after a large waiting one took the room as it
// freed, and a steady stream of small ones starved the large one.
TEST_CASE("LargeReservationIsServedBeforeSmallOnesThatArriveAfterIt") {
  PoolCounters pool;
  DecodeBudget budget(1000, &pool);
  auto held = std::make_unique<DecodeReservation>(&budget);
  REQUIRE(held->Reserve(600).ok());
  std::mutex mu;
  std::vector<int> order;  // guarded by mu
  auto reserve = [&](int bytes) {
    DecodeReservation r(&budget);
    const bool ok = r.Reserve(bytes).ok();  // Catch's macros are for the test's thread only
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(ok ? bytes : -bytes);
  };
  auto wait_for_waiters = [&](int n) {
    while (budget.waiting() < n) std::this_thread::yield();
  };
  std::thread large(reserve, 900);
  wait_for_waiters(1);
  std::thread small(reserve, 300);  // would fit beside the 600 held: it must wait its turn
  wait_for_waiters(2);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(order.empty());
  }
  held.reset();
  large.join();
  small.join();
  CHECK(order == std::vector<int>{900, 300});
  CHECK(pool.bytes == 0);
  CHECK(pool.peak <= 1000);
}

}  // namespace
}  // namespace sluice

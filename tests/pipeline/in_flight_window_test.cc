// InFlightWindow: the source blocks at the item and byte bounds, is woken by releases (once a
// run of records fits, or its record fits and no record bytes are in flight), and by Stop.
#include "pipeline/in_flight_window.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST_CASE("AcquireBlocksAtTheItemBoundUntilABurstIsReleased") {
  InFlightWindow window(/*items=*/16, /*bytes=*/1 << 20);  // burst: 16 / 8 = 2 items
  for (int i = 0; i < 16; ++i) REQUIRE(window.Acquire(10));
  std::atomic<bool> acquired{false};
  std::thread source([&] { acquired = window.Acquire(10); });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(acquired.load());
  window.ReleaseItems(2);
  source.join();
  CHECK(acquired.load());
}

// With every record's bytes through the batcher, nothing else may release: the consumer can hold
// its batches while it waits for the next one. So a release that frees less than a burst must
// still wake the source.
TEST_CASE("ReleaseOfLessThanABurstWakesTheSourceWhenNoBytesAreInFlight") {
  InFlightWindow window(/*items=*/32, /*bytes=*/1 << 20);  // burst: 32 / 8 = 4 items
  for (int i = 0; i < 32; ++i) REQUIRE(window.Acquire(10));
  window.ReleaseBytes(32 * 10);
  std::atomic<bool> acquired{false};
  std::thread source([&] { acquired = window.Acquire(10); });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(acquired.load());
  window.ReleaseItems(2);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!acquired.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  window.Stop();  // frees the thread if the wake was missed, so the test fails instead of hanging
  source.join();
  CHECK(acquired.load());
}

// The same release while record bytes are still in flight waits for them (a later ReleaseBytes
// is sure to come), and the last of them wakes the source.
TEST_CASE("LastBytesReleasedAfterASmallItemReleaseWakeTheSource") {
  InFlightWindow window(/*items=*/32, /*bytes=*/1 << 20);  // burst: 4 items
  for (int i = 0; i < 32; ++i) REQUIRE(window.Acquire(10));
  std::atomic<bool> acquired{false};
  std::thread source([&] { acquired = window.Acquire(10); });
  std::this_thread::sleep_for(50ms);
  window.ReleaseItems(2);
  window.ReleaseBytes(31 * 10);
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(acquired.load());  // less than a burst, and bytes still in flight
  window.ReleaseBytes(10);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!acquired.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  window.Stop();
  source.join();
  CHECK(acquired.load());
}

TEST_CASE("OneRecordPassesHoweverLargeAndTheNextWaitsForItsBytes") {
  InFlightWindow window(/*items=*/100, /*bytes=*/1000);
  REQUIRE(window.Acquire(5000));  // nothing in flight: one record always passes
  std::atomic<bool> acquired{false};
  std::thread source([&] { acquired = window.Acquire(10); });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(acquired.load());
  window.ReleaseBytes(5000);
  source.join();
  CHECK(acquired.load());
}

TEST_CASE("StopWakesAWaitingAcquireWhichThenFails") {
  InFlightWindow window(/*items=*/1, /*bytes=*/1000);
  REQUIRE(window.Acquire(1));
  std::atomic<int> result{-1};
  std::thread source([&] { result = window.Acquire(1) ? 1 : 0; });
  std::this_thread::sleep_for(20ms);
  window.Stop();
  source.join();
  CHECK(result == 0);
}

}  // namespace
}  // namespace sluice

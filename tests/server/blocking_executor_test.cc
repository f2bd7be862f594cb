// BlockingExecutor: tasks beyond its bound are refused (not queued), a task's slot is free again
// once it has run, WaitIdle reports a task that does not return, and destruction runs what was
// queued before it joins.
#include "server/blocking_executor.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pipeline/notification.h"

namespace sluice {
namespace {

TEST_CASE("TasksBeyondMaxTasksQueuedOrRunningAreRefusedNotQueued") {
  Notification release;
  Notification first_running;
  std::atomic<int> ran{0};
  {
    BlockingExecutor executor(/*threads=*/1, /*max_tasks=*/3);
    REQUIRE(executor.TrySubmit([&] {
      first_running.Notify();
      release.WaitForNotification();
      ++ran;
    }));
    first_running.WaitForNotification();
    // One running, two queued behind it: the bound counts both.
    REQUIRE(executor.TrySubmit([&] { ++ran; }));
    REQUIRE(executor.TrySubmit([&] { ++ran; }));
    CHECK(executor.busy() == 3);
    CHECK_FALSE(executor.TrySubmit([&] { ran += 100; }));
    CHECK(executor.busy() == 3);
    // Still blocked: WaitIdle says so at its deadline.
    CHECK_FALSE(executor.WaitIdle(std::chrono::steady_clock::now()));
    release.Notify();
    CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
    CHECK(ran == 3);
    // The slots are free again.
    REQUIRE(executor.TrySubmit([&] { ++ran; }));
    CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
  }
  CHECK(ran == 4);
}

TEST_CASE("DestructionRunsTheQueuedTasksThenJoins") {
  Notification release;
  Notification running;
  std::mutex mu;
  std::vector<int> order;
  auto executor = std::make_unique<BlockingExecutor>(/*threads=*/1, /*max_tasks=*/8);
  REQUIRE(executor->TrySubmit([&] {
    running.Notify();
    release.WaitForNotification();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(0);
  }));
  running.WaitForNotification();
  for (int i = 1; i < 5; ++i) {
    REQUIRE(executor->TrySubmit([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    }));
  }
  std::thread destroyer([&] { executor.reset(); });
  release.Notify();
  destroyer.join();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
}

TEST_CASE("AllThreadsRunTasksAtOnce") {
  // Four tasks that each wait for all four to be running: they finish only if four threads run
  // them together.
  constexpr int kThreads = 4;
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  BlockingExecutor executor(kThreads, kThreads);
  for (int i = 0; i < kThreads; ++i) {
    REQUIRE(executor.TrySubmit([&] {
      std::unique_lock<std::mutex> lock(mu);
      ++running;
      cv.notify_all();
      cv.wait(lock, [&] { return running == kThreads; });
    }));
  }
  CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
  CHECK(running == kThreads);
}

}  // namespace
}  // namespace sluice

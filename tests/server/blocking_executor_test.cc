// BlockingExecutor: tasks beyond its bound are refused (not queued), a task's slot is free again
// once it has run or been withdrawn, WaitIdle reports a task that does not return, one key's
// tasks never take every thread, and destruction runs what was queued before it joins.
#include "server/blocking_executor.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
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
    BlockingExecutor executor(/*threads=*/1, /*max_tasks=*/3, /*max_running_per_key=*/1);
    REQUIRE(executor.TrySubmit("k", nullptr, [&] {
      first_running.Notify();
      release.WaitForNotification();
      ++ran;
    }));
    first_running.WaitForNotification();
    // One running, two queued behind it: the bound counts both.
    REQUIRE(executor.TrySubmit("k", nullptr, [&] { ++ran; }));
    REQUIRE(executor.TrySubmit("k", nullptr, [&] { ++ran; }));
    CHECK(executor.busy() == 3);
    CHECK_FALSE(executor.TrySubmit("k", nullptr, [&] { ran += 100; }));
    CHECK(executor.busy() == 3);
    // Still blocked: WaitIdle says so at its deadline.
    CHECK_FALSE(executor.WaitIdle(std::chrono::steady_clock::now()));
    release.Notify();
    CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
    CHECK(ran == 3);
    // The slots are free again.
    REQUIRE(executor.TrySubmit("k", nullptr, [&] { ++ran; }));
    CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
  }
  CHECK(ran == 4);
}

TEST_CASE("DestructionRunsTheQueuedTasksThenJoins") {
  Notification release;
  Notification running;
  std::mutex mu;
  std::vector<int> order;
  auto executor = std::make_unique<BlockingExecutor>(/*threads=*/1, /*max_tasks=*/1 << 20,
                                                     /*max_running_per_key=*/1);
  REQUIRE(executor->TrySubmit("k", nullptr, [&] {
    running.Notify();
    release.WaitForNotification();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(0);
  }));
  running.WaitForNotification();
  for (int i = 1; i < 5; ++i) {
    REQUIRE(executor->TrySubmit("k", nullptr, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    }));
  }
  // The destructor is under way (it refuses new tasks) before the running task returns, so a
  // destructor that dropped the queued tasks would lose them every time. Tasks accepted before
  // it began run too.
  BlockingExecutor* raw = executor.get();
  std::thread destroyer([&] { executor.reset(); });
  std::atomic<int> probes_ran{0};
  int probes = 0;
  while (raw->TrySubmit("probe", nullptr, [&] { ++probes_ran; })) {
    ++probes;
    std::this_thread::yield();
  }
  release.Notify();
  destroyer.join();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(probes_ran == probes);
}

TEST_CASE("WithdrawnQueuedTaskNeverRunsAndFreesItsSlotAtOnce") {
  Notification release;
  Notification running;
  std::atomic<int> ran{0};
  int running_tag = 0, queued_tag = 0;
  BlockingExecutor executor(/*threads=*/1, /*max_tasks=*/2, /*max_running_per_key=*/1);
  REQUIRE(executor.TrySubmit("k", &running_tag, [&] {
    running.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  running.WaitForNotification();
  REQUIRE(executor.TrySubmit("k", &queued_tag, [&] { ran += 100; }));
  CHECK_FALSE(executor.TrySubmit("k", nullptr, [&] { ran += 1000; }));
  CHECK(executor.Withdraw(&queued_tag));
  CHECK(executor.busy() == 1);
  // Withdrawn once only; a running task cannot be withdrawn.
  CHECK_FALSE(executor.Withdraw(&queued_tag));
  CHECK_FALSE(executor.Withdraw(&running_tag));
  REQUIRE(executor.TrySubmit("k", nullptr, [&] { ++ran; }));
  release.Notify();
  CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
  CHECK(ran == 2);
}

TEST_CASE("OneKeysBlockedTasksLeaveAThreadToTheOtherKeys") {
  // Four threads, at most three running tasks of one key. Four tasks of "slow" wait until a
  // task of "fast" has run, and it waits until three of them run: the fourth queues, and "fast"
  // takes the free thread. Were all four threads given to "slow", nothing would release them
  // (the deadline below only turns that deadlock into a failure). "fast" waits for the three, not
  // only for its thread: a thread that has taken a slow task may not have started it yet.
  constexpr int kThreads = 4;
  Notification fast_ran;
  std::mutex mu;
  std::condition_variable slow_started;
  int slow_running = 0, slow_most = 0;  // guarded by mu
  BlockingExecutor executor(kThreads, /*max_tasks=*/16, /*max_running_per_key=*/kThreads - 1);
  for (int i = 0; i < kThreads; ++i) {
    REQUIRE(executor.TrySubmit("slow", nullptr, [&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        slow_most = std::max(slow_most, ++slow_running);
      }
      slow_started.notify_all();
      fast_ran.WaitForNotification();
      std::lock_guard<std::mutex> lock(mu);
      --slow_running;
    }));
  }
  REQUIRE(executor.TrySubmit("fast", nullptr, [&] {
    {
      std::unique_lock<std::mutex> lock(mu);
      // Bounded as the executor's wait below is: a failure, not a hang.
      slow_started.wait_for(lock, std::chrono::seconds(60),
                            [&] { return slow_running == kThreads - 1; });
    }
    fast_ran.Notify();
  }));
  const bool idle = executor.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(60));
  fast_ran.Notify();
  CHECK(idle);
  CHECK(executor.WaitIdle(std::chrono::steady_clock::time_point::max()));
  CHECK(slow_most == kThreads - 1);
}

TEST_CASE("AllThreadsRunTasksAtOnce") {
  // Four tasks that each wait for all four to be running: they finish only if four threads run
  // them together.
  constexpr int kThreads = 4;
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  BlockingExecutor executor(kThreads, kThreads, kThreads);
  for (int i = 0; i < kThreads; ++i) {
    REQUIRE(executor.TrySubmit("k", nullptr, [&] {
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

// A few threads for the server's work that may block on files (starting a job, counting a data
// set's records for equal shares or DescribeStream), so that no gRPC reaction waits on a disk:
// a fixed pool with a bounded count of tasks queued or running. Thread-safe.
//
// Not the JobRegistry's reaper thread: it destroys finished jobs and releases their memory
// budget, which a start blocked on a slow file would hold up (and one thread would start jobs
// one at a time); the reaper's interface stays the registry's own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class BlockingExecutor {
 public:
  // REQUIRES: threads >= 1, max_tasks >= 1. max_tasks: tasks queued or running at once.
  BlockingExecutor(int threads, int max_tasks);
  // Stops taking tasks, runs those queued, and joins the threads (a running task is waited for,
  // however long it blocks: see WaitIdle).
  ~BlockingExecutor();
  BlockingExecutor(const BlockingExecutor&) = delete;
  BlockingExecutor& operator=(const BlockingExecutor&) = delete;

  // Runs task on one of the threads, tasks in the order submitted. False (task dropped, not run)
  // when max_tasks are already queued or running, or the executor is being destroyed.
  bool TrySubmit(std::function<void()> task);
  // Waits until no task is queued or running, or until deadline; whether none is.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // Tasks queued or running.
  int busy() const;
  int max_tasks() const { return max_tasks_; }

 private:
  void Run();

  const int max_tasks_;
  mutable std::mutex mu_;
  std::condition_variable work_;             // a task was queued, or stopping_
  std::condition_variable idle_;             // busy_ became 0
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  int busy_ = 0;                             // queued or running; guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace sluice

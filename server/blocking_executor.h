// A few threads for the server's work that may block on files (starting a job, counting a data
// set's records for equal shares or DescribeStream), so that no gRPC reaction waits on a disk:
// a fixed pool with a bounded count of tasks queued or running. Thread-safe.
//
// Each task names its key (the data set whose files it reads): at most max_running_per_key tasks
// of one key run at once, so the tasks of a key whose files hang keep the other threads free for
// the other keys. A thread takes the oldest queued task whose key is under that cap.
//
// Not the JobRegistry's reaper thread: it destroys finished jobs and releases their memory
// budget, which a start blocked on a slow file would hold up (and one thread would start jobs
// one at a time); the reaper's interface stays the registry's own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice {

class BlockingExecutor {
 public:
  // REQUIRES: threads >= 1, max_tasks >= 1, max_running_per_key >= 1. max_tasks: tasks queued
  // or running at once.
  BlockingExecutor(int threads, int max_tasks, int max_running_per_key);
  // Stops taking tasks, runs those queued, and joins the threads (a running task is waited for,
  // however long it blocks: see WaitIdle).
  ~BlockingExecutor();
  BlockingExecutor(const BlockingExecutor&) = delete;
  BlockingExecutor& operator=(const BlockingExecutor&) = delete;

  // Runs task on one of the threads, the tasks of a key in the order submitted. tag: names the
  // task for Withdraw (null: none); at most one queued task per non-null tag. False (task
  // dropped, not run) when max_tasks are already queued or running, or the executor is being
  // destroyed.
  bool TrySubmit(const std::string& key, const void* tag, std::function<void()> task);
  // Removes the task tagged `tag` if it is still queued (destroyed, never run; its slot is free
  // at once); whether it was. False when it is running, has run, or was never submitted.
  bool Withdraw(const void* tag);
  // Waits until no task is queued or running, or until deadline; whether none is.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // Tasks queued or running.
  int busy() const;
  int max_tasks() const { return max_tasks_; }

 private:
  struct Queued {
    std::string key;
    const void* tag;
    std::function<void()> task;
  };
  void Run();
  // The oldest queued task whose key may run one more, or queue_.end(). REQUIRES: mu_ held.
  std::list<Queued>::iterator NextRunnable();

  const int max_tasks_;
  const int max_running_per_key_;
  mutable std::mutex mu_;
  std::condition_variable work_;  // a task was queued, a key's running count fell, or stopping_
  std::condition_variable idle_;  // busy_ became 0
  std::list<Queued> queue_;       // oldest first; guarded by mu_
  std::map<std::string, int> running_;  // running tasks per key (no zero entries); guarded by mu_
  int busy_ = 0;                        // queued or running; guarded by mu_
  bool stopping_ = false;               // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace sluice

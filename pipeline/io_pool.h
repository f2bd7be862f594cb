// A small, fixed set of threads for file reads (and the inflation of compressed shards) of one
// pipeline iterator: the interleave cycle's files are read ahead on it in parallel while the
// source thread parses records (pipeline/read_ahead_file.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class IoPool {
 public:
  using TaskId = uint64_t;

  // Starts `threads` threads (at least 1).
  explicit IoPool(int threads);
  // Joins the threads. Tasks still queued are dropped without running.
  // REQUIRES: every owner of a task has cancelled it or waited for it (ReadAheadFile does both in
  // its destructor), so no running task refers to freed state.
  ~IoPool();

  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  // Queues `task` (run once, in submission order, on some pool thread). The queue is not bounded
  // here: each ReadAheadFile has at most one task queued or running, so it holds at most as many
  // tasks as there are open files. Thread-safe.
  TaskId Submit(std::function<void()> task);

  // Removes the task if no thread has started it: true means it will never run. False means it
  // is running or done. Thread-safe.
  bool Cancel(TaskId id);

 private:
  struct Task {
    TaskId id;
    std::function<void()> run;
  };
  void Work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  TaskId next_id_ = 1;      // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace sluice

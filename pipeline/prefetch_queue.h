// The prefetch queue between the batcher and the consumer: finished batches, the end of the
// stream, or the error that ends it, in order. Bounded by the batch pool: every batch in it holds
// one of the pool's buffers, and the end or an error is pushed at most once. Thread-safe; one
// consumer.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "formats/status.h"
#include "pipeline/batch.h"
#include "pipeline/stats.h"

namespace sluice {

// One entry of the queue.
struct Ready {
  Batch batch;
  Status error;
  bool end = false;
  // With the end or an error: records skipped after the last batch, which no batch carries.
  uint64_t skipped = 0;
};

class PrefetchQueue {
 public:
  // stats: queue_fill is kept current; the batch stage's item count tells the stall detector
  // whether anything moves.
  explicit PrefetchQueue(PipelineStats* stats) : stats_(stats) {}

  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // Appends r, wakes the consumer and calls the ready callback (on the caller's thread).
  void Push(Ready r);
  // Takes the first entry without waiting; false when there is none.
  bool TryPop(Ready* r);
  // Takes the first entry, waiting for one. Returns false instead when `stalled` (asked with the
  // queue's lock held; it must not call into the queue) has held, the queue empty and the batch
  // stage still, for a second: a stall only the consumer can end. Woken by Push and Recheck.
  bool Pop(Ready* r, const std::function<bool()>& stalled);
  // The stall condition may have begun: Pop looks again.
  void Recheck();

  void SetReadyCallback(std::function<void()> callback);
  // Drops every entry (returning their buffers).
  void Clear();

 private:
  void TakeFront(Ready* r);  // REQUIRES: mu_ held, ready_ not empty.

  PipelineStats* const stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ready> ready_;         // guarded by mu_
  std::function<void()> on_ready_;  // guarded by mu_
};

}  // namespace sluice

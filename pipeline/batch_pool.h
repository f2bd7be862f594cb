// The batch buffers of one iterator: prefetch + kBatchPoolExtra buffers allocated once and lent
// out in turn, accounted in stats as the kBatchPool pool. Buffers run out only when the consumer
// holds batches (see ConsumerHoldsThePool). Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pipeline/batch.h"
#include "pipeline/options.h"
#include "pipeline/stats.h"

namespace sluice {

class BatchPool {
 public:
  // on_wait is called, without the pool's lock, each time a thread begins to wait for a buffer:
  // the moment a stall only the consumer can end may begin. It must not call into the pool.
  BatchPool(const ResolvedOptions& options, PoolCounters* stats, std::function<void()> on_wait);
  ~BatchPool();

  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // Blocks until a buffer is free, woken by Release; nullptr once stopped. REQUIRES: not after
  // Detach (the pool outlives its iterator inside the batches, on_wait does not): only the
  // iterator's source thread acquires, and it is joined before Detach.
  BatchBuffer* Acquire();
  void Release(BatchBuffer* buffer);
  // A buffer became a batch the consumer holds until it releases it (Release + BatchReturned).
  void BatchLent();
  void BatchReturned();
  int lent();

  // A thread waits for a buffer while every lent batch but `queued` is the consumer's: only the
  // consumer can make progress possible, by releasing one.
  bool ConsumerHoldsThePool(int queued);

  // Wakes every waiter; Acquire returns nullptr from now on when it would wait.
  void Stop();
  // The stats are gone (their iterator is): buffers in use are no longer accounted.
  void Detach();

 private:
  PoolCounters* const stats_;
  const std::function<void()> on_wait_;
  std::vector<std::unique_ptr<BatchBuffer>> buffers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<BatchBuffer*> free_;    // guarded by mu_
  std::vector<BatchBuffer*> in_use_;  // guarded by mu_
  int waiters_ = 0;                   // threads waiting for a buffer; guarded by mu_
  int lent_ = 0;                      // batches lent and not yet returned; guarded by mu_
  bool stopped_ = false;              // guarded by mu_
  bool detached_ = false;             // guarded by mu_
};

}  // namespace sluice

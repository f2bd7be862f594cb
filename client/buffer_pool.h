// The buffers of one server stream and the leases that lend them to the consumer (internal to
// client/).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "client/client.h"
#include "client/wire/batch_wire.h"

namespace sluice {

// One server stream's buffers: prefetch + max_held of them. A buffer is free, read ahead (taken
// by the reader thread, not yet leased) or leased to the consumer. Shared by the reader, the
// consumer and every lease, so a lease may outlive the stream; the buffers are freed with the
// last reference.
class BufferPool {
 public:
  explicit BufferPool(const ClientOptions& options);

  // For the reader: blocks until a buffer is free and fewer than `prefetch` are read ahead, so
  // the extra max_held buffers are allocated only when the consumer holds batches. Null once
  // closed.
  BatchArrays* Acquire();
  // A buffer the reader acquired and did not fill.
  void Unacquire(BatchArrays* arrays);
  // Hands a read-ahead buffer to the consumer.
  static BatchLease Lease(std::shared_ptr<BufferPool> pool, BatchArrays* arrays);
  void Return(BatchArrays* arrays) noexcept;
  // Wakes and fails a waiting Acquire(), and every later one.
  void Close();
  int leased();

 private:
  const int ahead_limit_;
  std::vector<BatchArrays> slots_;  // never resized: free_ and leases point into it

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<BatchArrays*> free_;  // guarded by mu_
  int ahead_ = 0;                   // guarded by mu_
  int leased_ = 0;                  // guarded by mu_
  bool closed_ = false;             // guarded by mu_
};

}  // namespace sluice

// The bound on records in flight: at most `items` records from the source to the consumer's
// release of their batch, and at most `bytes` of their record bytes from the source to the
// batcher (one record always passes, however large). The source waits here, woken by the
// releases. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace sluice {

class InFlightWindow {
 public:
  InFlightWindow(int64_t items, int64_t bytes);

  InFlightWindow(const InFlightWindow&) = delete;
  InFlightWindow& operator=(const InFlightWindow&) = delete;

  // Takes room for one record of `bytes`, blocking while there is none. False once stopped.
  bool Acquire(int64_t bytes);
  // A record's bytes are done with (the batcher has placed or skipped it).
  void ReleaseBytes(int64_t bytes);
  // Records are done with (their batch was released, or they belong to none).
  void ReleaseItems(uint64_t n);
  // Wakes the waiting source; Acquire returns false from now on when it would wait.
  void Stop();

 private:
  bool Full(int64_t bytes) const;  // REQUIRES: mu_ held.
  bool ShouldWake() const;         // REQUIRES: mu_ held.

  const int64_t items_;
  const int64_t bytes_;
  const int64_t burst_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t in_flight_ = 0;        // guarded by mu_
  int64_t bytes_in_flight_ = 0;  // guarded by mu_
  int waiters_ = 0;              // guarded by mu_
  int64_t waiting_bytes_ = 0;    // the waiting record's bytes; guarded by mu_
  bool stopped_ = false;         // guarded by mu_
};

}  // namespace sluice

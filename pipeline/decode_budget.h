// The decoders' share of a pipeline's memory budget (ResolvedOptions::decode_budget_bytes): each
// decode reserves what its image needs, estimated from the header before anything is allocated,
// and gives it back when done. An image that needs more than the whole share is refused; one that
// needs more than is free waits for the decodes in progress, so `threads` concurrent decodes stay
// within the share together. Waiters are served in arrival order, so a large reservation is not
// starved by a stream of small ones. Accounted as the "decode" pool. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "formats/status.h"
#include "pipeline/stats.h"

namespace sluice {

class DecodeBudget {
 public:
  DecodeBudget(int64_t bytes, PoolCounters* pool);

  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // Takes `bytes`, waiting (woken by Release) while other decodes hold too much of the share or
  // an earlier Reserve still waits.
  // ResourceExhausted, without waiting, when bytes exceed the whole share: what, naming the
  // estimate and the limit, the image is refused with.
  Status Reserve(int64_t bytes);
  // Gives back what Reserve took.
  void Release(int64_t bytes);

  int64_t limit() const { return limit_; }
  // Reserves waiting now (for tests).
  int waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(next_ticket_ - serving_);
  }

 private:
  const int64_t limit_;
  PoolCounters* const pool_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t used_ = 0;  // guarded by mu_
  // Tickets: the next one handed out, and the one whose turn it is. Guarded by mu_.
  uint64_t next_ticket_ = 0;
  uint64_t serving_ = 0;
};

// What one decode holds: Reserve through it, and its destructor gives the bytes back.
class DecodeReservation {
 public:
  explicit DecodeReservation(DecodeBudget* budget) : budget_(budget) {}
  ~DecodeReservation() {
    if (bytes_ > 0) budget_->Release(bytes_);
  }
  DecodeReservation(const DecodeReservation&) = delete;
  DecodeReservation& operator=(const DecodeReservation&) = delete;

  // At most once per reservation: a second call (a decoder asking its gate twice) is refused with
  // Internal rather than hold bytes the destructor would not give back.
  Status Reserve(int64_t bytes) {
    if (taken_) {
      return Internal("a DecodeReservation is taken at most once (asked again for " +
                      std::to_string(bytes) + " bytes after " + std::to_string(bytes_) + ")");
    }
    taken_ = true;
    RETURN_IF_ERROR(budget_->Reserve(bytes));
    bytes_ = bytes;
    return Status::OK();
  }

 private:
  DecodeBudget* const budget_;
  int64_t bytes_ = 0;
  bool taken_ = false;
};

}  // namespace sluice

// The decoders' share of a pipeline's memory budget (ResolvedOptions::decode_budget_bytes): each
// decode reserves what its image needs, estimated from the header before anything is allocated,
// and gives it back when done. An image that needs more than the whole share is refused; one that
// needs more than is free waits for the decodes in progress, so `threads` concurrent decodes stay
// within the share together. Accounted as the "decode" pool. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "formats/status.h"
#include "pipeline/stats.h"

namespace sluice {

class DecodeBudget {
 public:
  DecodeBudget(int64_t bytes, PoolCounters* pool);

  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // Takes `bytes`, waiting (woken by Release) while other decodes hold too much of the share.
  // ResourceExhausted, without waiting, when bytes exceed the whole share: what, naming the
  // estimate and the limit, the image is refused with.
  Status Reserve(int64_t bytes);
  // Gives back what Reserve took.
  void Release(int64_t bytes);

  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  PoolCounters* const pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t used_ = 0;  // guarded by mu_
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

  // At most once per reservation. REQUIRES: nothing reserved yet.
  Status Reserve(int64_t bytes) {
    RETURN_IF_ERROR(budget_->Reserve(bytes));
    bytes_ = bytes;
    return Status::OK();
  }

 private:
  DecodeBudget* const budget_;
  int64_t bytes_ = 0;
};

}  // namespace sluice

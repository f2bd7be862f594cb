#include "pipeline/decode_budget.h"

#include <string>

namespace sluice {

DecodeBudget::DecodeBudget(int64_t bytes, PoolCounters* pool) : limit_(bytes), pool_(pool) {
  pool_->limit = bytes;
}

Status DecodeBudget::Reserve(int64_t bytes) {
  if (bytes > limit_) {
    return ResourceExhausted("decoding it needs an estimated " + std::to_string(bytes) +
                             " bytes, over the " + std::to_string(limit_) +
                             " bytes the memory budget leaves for decoding");
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    // First come, first served: a large reservation waits for room, and the small ones that
    // arrive after it wait behind it instead of taking the room as it frees.
    const uint64_t ticket = next_ticket_++;
    cv_.wait(lock, [&] { return ticket == serving_ && used_ + bytes <= limit_; });
    ++serving_;
    used_ += bytes;
  }
  // The next in line may fit too.
  cv_.notify_all();
  pool_->Add(bytes);
  return Status::OK();
}

void DecodeBudget::Release(int64_t bytes) {
  pool_->Remove(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    used_ -= bytes;
  }
  cv_.notify_all();
}

}  // namespace sluice

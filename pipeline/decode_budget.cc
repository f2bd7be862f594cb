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
    cv_.wait(lock, [&] { return used_ + bytes <= limit_; });
    used_ += bytes;
  }
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

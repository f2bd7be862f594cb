#include "pipeline/parallelism_gate.h"

#include <algorithm>

namespace sluice {

ParallelismGate::ParallelismGate(int max) : max_(std::max(1, max)), limit_(max_) {}

void ParallelismGate::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  if (inside_ >= limit_) {
    ++waiting_;
    cv_.wait(lock, [this] { return inside_ < limit_; });
    --waiting_;
  }
  ++inside_;
}

void ParallelismGate::Release() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inside_;
    wake = waiting_ > 0 && inside_ < limit_;
  }
  if (wake) cv_.notify_one();
}

void ParallelismGate::SetLimit(int limit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = std::clamp(limit, 1, max_);
  }
  cv_.notify_all();
}

int ParallelismGate::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

}  // namespace sluice

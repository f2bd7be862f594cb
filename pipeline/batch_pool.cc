#include "pipeline/batch_pool.h"

#include <utility>

namespace sluice {

BatchPool::BatchPool(const ResolvedOptions& options, PoolCounters* stats,
                     std::function<void()> on_wait)
    : stats_(stats), on_wait_(std::move(on_wait)) {
  const int buffers = options.prefetch + kBatchPoolExtra;
  for (int i = 0; i < buffers; ++i) {
    buffers_.push_back(std::make_unique<BatchBuffer>(
        options.batch_size, options.height, options.width, options.equalizes(), options.record_ids,
        options.transforms.output.dtype, options.transforms.output.layout,
        options.transforms.mixes_labels(), options.features.array_count(),
        options.features.slot_bytes()));
    free_.push_back(buffers_.back().get());
  }
  stats_->limit = static_cast<int64_t>(buffers) * static_cast<int64_t>(buffers_[0]->bytes());
}

BatchPool::~BatchPool() { Detach(); }

BatchBuffer* BatchPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  if (free_.empty() && !stopped_) {
    ++waiters_;
    lock.unlock();
    if (on_wait_) on_wait_();
    lock.lock();
    cv_.wait(lock, [this] { return !free_.empty() || stopped_; });
    --waiters_;
  }
  if (free_.empty()) return nullptr;  // stopped
  BatchBuffer* b = free_.back();
  free_.pop_back();
  in_use_.push_back(b);
  if (!detached_) stats_->Add(static_cast<int64_t>(b->bytes()));
  return b;
}

void BatchPool::Release(BatchBuffer* buffer) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(in_use_, buffer);
    free_.push_back(buffer);
    if (!detached_) stats_->Remove(static_cast<int64_t>(buffer->bytes()));
    wake = waiters_ > 0;
  }
  if (wake) cv_.notify_all();
}

void BatchPool::BatchLent() {
  std::lock_guard<std::mutex> lock(mu_);
  ++lent_;
}

void BatchPool::BatchReturned() {
  std::lock_guard<std::mutex> lock(mu_);
  --lent_;
}

int BatchPool::lent() {
  std::lock_guard<std::mutex> lock(mu_);
  return lent_;
}

bool BatchPool::ConsumerHoldsThePool(int queued) {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_ > 0 && lent_ > queued;
}

void BatchPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

void BatchPool::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!detached_) {
    for (BatchBuffer* b : in_use_) stats_->Remove(static_cast<int64_t>(b->bytes()));
  }
  in_use_.clear();
  detached_ = true;
}

}  // namespace sluice

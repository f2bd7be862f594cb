#include "pipeline/prefetch_queue.h"

#include <chrono>
#include <optional>
#include <utility>

namespace sluice {
namespace {

// How long a stall must last, with nothing moving, before the consumer is told it holds the pool.
constexpr std::chrono::seconds kStallTimeout{1};

}  // namespace

void PrefetchQueue::Push(Ready r) {
  std::function<void()> on_ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(r));
    stats_->queue_fill = static_cast<int>(ready_.size());
    on_ready = on_ready_;
  }
  cv_.notify_one();
  if (on_ready) on_ready();
}

void PrefetchQueue::TakeFront(Ready* r) {
  *r = std::move(ready_.front());
  ready_.pop_front();
  stats_->queue_fill = static_cast<int>(ready_.size());
}

bool PrefetchQueue::TryPop(Ready* r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_.empty()) return false;
  TakeFront(r);
  return true;
}

bool PrefetchQueue::Pop(Ready* r, const std::function<bool()>& stalled) {
  using Clock = std::chrono::steady_clock;
  const std::atomic<uint64_t>& batched = stats_->stage(Stage::kBatch).items;
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<Clock::time_point> stalled_since;
  uint64_t seen = 0;
  while (ready_.empty()) {
    if (!stalled()) {
      stalled_since.reset();
      cv_.wait(lock);
      continue;
    }
    const uint64_t now = batched.load();
    if (!stalled_since || now != seen) {
      stalled_since = Clock::now();
      seen = now;
    }
    if (Clock::now() - *stalled_since >= kStallTimeout) return false;
    // The one timed wait: the stall's deadline. Pushes and Recheck end it early.
    cv_.wait_until(lock, *stalled_since + kStallTimeout);
  }
  TakeFront(r);
  return true;
}

void PrefetchQueue::Recheck() {
  { std::lock_guard<std::mutex> lock(mu_); }  // a Pop between its check and its wait sees this
  cv_.notify_all();
}

void PrefetchQueue::SetReadyCallback(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_ready_ = std::move(callback);
}

void PrefetchQueue::Clear() {
  std::deque<Ready> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(ready_);
    stats_->queue_fill = 0;
  }
}

}  // namespace sluice

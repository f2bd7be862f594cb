#include "server/slot_watcher.h"

#include <algorithm>
#include <chrono>
#include <iterator>

namespace sluice {

SlotWatcher::SlotWatcher() : thread_([this] { Run(); }) {}

SlotWatcher::~SlotWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SlotWatcher::Watch(const void* owner, std::function<bool()> check,
                        std::function<void()> ready) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back({owner, std::move(check), std::move(ready)});
  }
  cv_.notify_all();
}

void SlotWatcher::Cancel(const void* owner) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return running_ != owner; });
  entries_.remove_if([&](const Entry& e) { return e.owner == owner; });
}

void SlotWatcher::Run() {
  // Polls every 200 µs after something changed, backing off to 2 ms while nothing does (a
  // trainer slower than the server keeps its stream waiting for slots most of the time).
  constexpr auto kFastest = std::chrono::microseconds(200);
  constexpr auto kSlowest = std::chrono::microseconds(2000);
  auto interval = kFastest;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !entries_.empty(); });
    if (stop_) return;
    bool any_fired = false;
    // One pass: each entry's check (and ready) runs without the lock, marked as running so
    // that Cancel of its owner waits for it; meanwhile only other owners' entries can go (list
    // iterators to the others stay valid) and new ones are appended.
    for (auto it = entries_.begin(); it != entries_.end();) {
      running_ = it->owner;
      lock.unlock();
      const bool fired = it->check();
      if (fired) it->ready();
      lock.lock();
      running_ = nullptr;
      any_fired |= fired;
      it = fired ? entries_.erase(it) : std::next(it);
      cv_.notify_all();
      if (stop_) return;
    }
    interval = any_fired ? kFastest : std::min(interval * 2, kSlowest);
    const size_t watched = entries_.size();
    // A new watch resets the pace: its condition may already hold.
    if (cv_.wait_for(lock, interval, [&] { return stop_ || entries_.size() > watched; })) {
      interval = kFastest;
    }
  }
}

}  // namespace sluice

#include "server/slot_watcher.h"

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
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !entries_.empty(); });
    if (stop_) return;
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
      it = fired ? entries_.erase(it) : std::next(it);
      cv_.notify_all();
      if (stop_) return;
    }
    cv_.wait_for(lock, std::chrono::microseconds(200), [this] { return stop_; });
  }
}

}  // namespace sluice

// A one-shot event one thread waits for and others signal (absl::Notification's contract):
// once Notify() has been called, WaitForNotification() returns at once, forever. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace sluice {

class Notification {
 public:
  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (notified_) return;
      notified_ = true;
    }
    cv_.notify_all();
  }
  void WaitForNotification() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return notified_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;  // guarded by mu_
};

// A count one thread waits to reach and another raises; Cancel() wakes every waiter for good.
// Thread-safe.
class CountGate {
 public:
  void Add() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
    }
    cv_.notify_all();
  }
  void Cancel() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
  }
  // True once the count is at least n; false when cancelled first.
  bool WaitFor(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ >= n || cancelled_; });
    return count_ >= n;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;      // guarded by mu_
  bool cancelled_ = false;  // guarded by mu_
};

}  // namespace sluice

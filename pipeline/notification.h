// A one-shot event one thread waits for and others signal (absl::Notification's contract):
// once Notify() has been called, WaitForNotification() returns at once, forever. Thread-safe.
#pragma once

#include <condition_variable>
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

}  // namespace sluice

#include "server/blocking_executor.h"

namespace sluice {

BlockingExecutor::BlockingExecutor(int threads, int max_tasks) : max_tasks_(max_tasks) {
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

BlockingExecutor::~BlockingExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool BlockingExecutor::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || busy_ >= max_tasks_) return false;
    ++busy_;
    queue_.push_back(std::move(task));
  }
  work_.notify_one();
  return true;
}

bool BlockingExecutor::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_until(lock, deadline, [this] { return busy_ == 0; });
}

int BlockingExecutor::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void BlockingExecutor::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    // Stopping still runs what was queued: a task's owner may count on it (to release a hold).
    if (queue_.empty()) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // whatever it captured goes before it counts as done
    lock.lock();
    if (--busy_ == 0) idle_.notify_all();
  }
}

}  // namespace sluice

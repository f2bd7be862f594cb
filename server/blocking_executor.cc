#include "server/blocking_executor.h"

#include <algorithm>

namespace sluice {

BlockingExecutor::BlockingExecutor(int threads, int max_tasks, int max_running_per_key)
    : max_tasks_(max_tasks), max_running_per_key_(max_running_per_key) {
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

bool BlockingExecutor::TrySubmit(const std::string& key, const void* tag,
                                 std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || busy_ >= max_tasks_) return false;
    ++busy_;
    queue_.push_back(Queued{key, tag, std::move(task)});
  }
  work_.notify_one();
  return true;
}

bool BlockingExecutor::Withdraw(const void* tag) {
  if (tag == nullptr) return false;
  std::function<void()> task;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it =
        std::find_if(queue_.begin(), queue_.end(), [tag](const Queued& q) { return q.tag == tag; });
    if (it == queue_.end()) return false;
    task = std::move(it->task);
    queue_.erase(it);
    if (--busy_ == 0) idle_.notify_all();
  }
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

std::list<BlockingExecutor::Queued>::iterator BlockingExecutor::NextRunnable() {
  return std::find_if(queue_.begin(), queue_.end(), [this](const Queued& q) {
    auto it = running_.find(q.key);
    return it == running_.end() || it->second < max_running_per_key_;
  });
}

void BlockingExecutor::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto next = queue_.end();
    // Stopping still runs what was queued: a task's owner may count on it (to release a hold).
    work_.wait(lock, [&] {
      next = NextRunnable();
      return next != queue_.end() || (stopping_ && queue_.empty());
    });
    if (next == queue_.end()) return;
    const std::string key = std::move(next->key);
    std::function<void()> task = std::move(next->task);
    queue_.erase(next);
    ++running_[key];
    lock.unlock();
    task();
    task = nullptr;  // whatever it captured goes before it counts as done
    lock.lock();
    if (--running_[key] == 0) running_.erase(key);
    // A task of this key may run now, on a thread that found none to take.
    work_.notify_all();
    if (--busy_ == 0) idle_.notify_all();
  }
}

}  // namespace sluice

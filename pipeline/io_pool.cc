#include "pipeline/io_pool.h"

#include <algorithm>
#include <utility>

namespace sluice {

IoPool::IoPool(int threads) {
  const int n = std::max(1, threads);
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
}

IoPool::~IoPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

IoPool::TaskId IoPool::Submit(std::function<void()> task) {
  TaskId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    queue_.push_back({id, std::move(task)});
  }
  cv_.notify_one();
  return id;
}

bool IoPool::Cancel(TaskId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(queue_.begin(), queue_.end(), [id](const Task& t) { return t.id == id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

void IoPool::Work() {
  for (;;) {
    std::function<void()> run;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      run = std::move(queue_.front().run);
      queue_.pop_front();
    }
    run();
  }
}

}  // namespace sluice

#include "client/buffer_pool.h"

#include <utility>

#include "client/wire/shared_segment.h"

namespace sluice {
namespace {

// Gives a shared-memory batch's slot back to the server.
void ReleaseShared(BatchArrays* arrays) {
  if (arrays->segment == nullptr) return;
  arrays->segment->Free(static_cast<int>(arrays->shared_slot));
  arrays->segment.reset();
  arrays->shared_images = nullptr;
}

}  // namespace

BufferPool::BufferPool(const ClientOptions& options) : ahead_limit_(options.prefetch) {
  const int size = options.prefetch + options.max_held;
  slots_.reserve(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) {
    slots_.emplace_back(options.allocator);
    free_.push_back(&slots_.back());
  }
}

BatchArrays* BufferPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return closed_ || (!free_.empty() && ahead_ < ahead_limit_); });
  if (closed_) return nullptr;
  ++ahead_;
  BatchArrays* arrays = free_.back();
  free_.pop_back();
  return arrays;
}

void BufferPool::Unacquire(BatchArrays* arrays) {
  ReleaseShared(arrays);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --ahead_;
    free_.push_back(arrays);
  }
  cv_.notify_all();
}

BatchLease BufferPool::Lease(std::shared_ptr<BufferPool> pool, BatchArrays* arrays) {
  {
    std::lock_guard<std::mutex> lock(pool->mu_);
    --pool->ahead_;
    ++pool->leased_;
  }
  pool->cv_.notify_all();
  return {std::move(pool), arrays};
}

void BufferPool::Return(BatchArrays* arrays) noexcept {
  ReleaseShared(arrays);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --leased_;
    free_.push_back(arrays);
  }
  cv_.notify_all();
}

void BufferPool::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

int BufferPool::leased() {
  std::lock_guard<std::mutex> lock(mu_);
  return leased_;
}

BatchLease::~BatchLease() { Release(); }

BatchLease::BatchLease(BatchLease&& other) noexcept
    : pool_(std::move(other.pool_)), arrays_(std::exchange(other.arrays_, nullptr)) {}

BatchLease& BatchLease::operator=(BatchLease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    arrays_ = std::exchange(other.arrays_, nullptr);
  }
  return *this;
}

void BatchLease::Release() noexcept {
  if (arrays_ == nullptr) return;
  pool_->Return(std::exchange(arrays_, nullptr));
  pool_.reset();
}
}  // namespace sluice

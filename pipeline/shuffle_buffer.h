// tf.data's shuffle: a buffer of `capacity` items; once full, each new item takes the place of a
// uniformly chosen one, which is emitted. At the end of the epoch the rest drains in random
// order. Seeded, so the order depends only on the seed and the input order. Not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "pipeline/stats.h"
#include "pipeline/work_item.h"

namespace sluice {

class ShuffleBuffer {
 public:
  ShuffleBuffer(size_t capacity, PoolCounters* pool) : capacity_(capacity), pool_(pool) {
    items_.reserve(capacity);
  }

  void StartEpoch(uint64_t seed) { rng_.seed(seed); }

  // Takes w; returns the item to emit now, or nullptr while the buffer is filling.
  WorkItem* Push(WorkItem* w) {
    if (capacity_ == 0) return w;
    if (items_.size() < capacity_) {
      pool_->Add(w->held_bytes());
      items_.push_back(w);
      return nullptr;
    }
    size_t i = std::uniform_int_distribution<size_t>(0, items_.size() - 1)(rng_);
    WorkItem* out = items_[i];
    pool_->Remove(out->held_bytes());
    pool_->Add(w->held_bytes());
    items_[i] = w;
    return out;
  }

  // Next item of the drain at the end of an epoch; nullptr when empty.
  WorkItem* Drain() {
    if (items_.empty()) return nullptr;
    size_t i = std::uniform_int_distribution<size_t>(0, items_.size() - 1)(rng_);
    WorkItem* out = items_[i];
    items_[i] = items_.back();
    items_.pop_back();
    pool_->Remove(out->held_bytes());
    return out;
  }

  size_t size() const { return items_.size(); }

 private:
  const size_t capacity_;
  PoolCounters* pool_;
  std::vector<WorkItem*> items_;
  std::mt19937_64 rng_;
};

}  // namespace sluice

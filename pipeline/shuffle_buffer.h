// tf.data's shuffle: a buffer of `capacity` items; once full, each new item takes the place of a
// uniformly chosen one, which is emitted. At the end of the epoch the rest drains in random
// order. Bounded in bytes too: items are measured by their record's length (WorkItem::length,
// the same whichever path brought them), and when a new one would take the buffer over its byte
// share, uniformly chosen items are emitted before it is taken, as if the buffer were smaller.
// A record longer than max_record_bytes (refused: it holds no bytes) is charged 0, decided from
// the length alone so that every path charges it alike. Seeded, so the order depends only on the
// seed, the byte share and the input (its order and lengths). Not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "pipeline/stats.h"
#include "pipeline/work_item.h"

namespace sluice {

class ShuffleBuffer {
 public:
  // budget_bytes: the byte share (0 with capacity 0). max_record_bytes: the longest record a
  // job holds (ResolvedOptions::max_held_record_bytes). pool accounts what the items hold.
  ShuffleBuffer(size_t capacity, int64_t budget_bytes, int64_t max_record_bytes, PoolCounters* pool)
      : capacity_(capacity),
        budget_bytes_(static_cast<uint64_t>(budget_bytes)),
        max_record_bytes_(static_cast<uint64_t>(max_record_bytes)),
        pool_(pool) {
    items_.reserve(capacity);
    pool_->limit = budget_bytes;
  }

  void StartEpoch(uint64_t seed) {
    rng_.seed(seed);
    most_held_ = 0;
    capped_ = 0;
  }

  // Offers w. Returns an item to emit now (uniformly chosen), or nullptr while the buffer is
  // filling. *taken: whether w is in the buffer now (or returned, with capacity 0); while it is
  // not, emit what was returned and offer w again.
  WorkItem* Push(WorkItem* w, bool* taken) {
    *taken = true;
    if (capacity_ == 0) return w;
    const uint64_t charge = Charge(*w);
    // Overflow-safe form of length_ + charge > budget_bytes_ (a lone item may exceed the share).
    if (!items_.empty() && (length_ > budget_bytes_ || charge > budget_bytes_ - length_)) {
      ++capped_;
      *taken = false;
      return Take(Pick());
    }
    length_ += charge;
    pool_->Add(w->held_bytes());
    if (items_.size() < capacity_) {
      items_.push_back(w);
      most_held_ = std::max(most_held_, items_.size());
      return nullptr;
    }
    const size_t i = Pick();
    WorkItem* out = items_[i];
    items_[i] = w;
    length_ -= Charge(*out);
    pool_->Remove(out->held_bytes());
    return out;
  }

  // Next item of the drain at the end of an epoch; nullptr when empty.
  WorkItem* Drain() {
    if (items_.empty()) return nullptr;
    return Take(Pick());
  }

  size_t size() const { return items_.size(); }
  // Since StartEpoch: the most items held at once, and how many items the byte share made it
  // emit early.
  size_t most_held() const { return most_held_; }
  uint64_t capped() const { return capped_; }

 private:
  uint64_t Charge(const WorkItem& w) const { return w.length > max_record_bytes_ ? 0 : w.length; }
  size_t Pick() { return std::uniform_int_distribution<size_t>(0, items_.size() - 1)(rng_); }
  WorkItem* Take(size_t i) {
    WorkItem* out = items_[i];
    items_[i] = items_.back();
    items_.pop_back();
    length_ -= Charge(*out);
    pool_->Remove(out->held_bytes());
    return out;
  }

  const size_t capacity_;
  const uint64_t budget_bytes_;
  const uint64_t max_record_bytes_;
  PoolCounters* pool_;
  std::vector<WorkItem*> items_;
  uint64_t length_ = 0;  // charged for the items held
  std::mt19937_64 rng_;
  size_t most_held_ = 0;
  uint64_t capped_ = 0;
};

}  // namespace sluice

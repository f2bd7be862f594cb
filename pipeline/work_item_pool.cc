#include "pipeline/work_item_pool.h"

#include <string>

namespace sluice {

WorkItem* WorkItemPool::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    items_.push_back(std::make_unique<WorkItem>());
    return items_.back().get();
  }
  WorkItem* w = free_.back();
  free_.pop_back();
  return w;
}

void WorkItemPool::Recycle(WorkItem* w) {
  w->cached = nullptr;
  w->bytes = {};
  w->lazy_length = 0;
  w->length = 0;
  // Free the record: a pooled item must not keep a record's worth of memory that no budget
  // counts. malloc hands the same chunks to the next records.
  std::string().swap(w->owned);
  w->status = Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(w);
}

}  // namespace sluice

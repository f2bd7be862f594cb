// The WorkItems of one iterator, reused so the steady state allocates nothing. The pool owns
// every item it made; the graph carries plain pointers to them. It grows only while every item
// is in flight, so its size is bounded by the in-flight window plus the shuffle buffer. Thread-
// safe: the source takes items, the batch stage gives them back.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "pipeline/work_item.h"

namespace sluice {

class WorkItemPool {
 public:
  WorkItemPool() = default;
  WorkItemPool(const WorkItemPool&) = delete;
  WorkItemPool& operator=(const WorkItemPool&) = delete;

  // A fresh item, or a recycled one (kind and positions as it was last left; no record bytes).
  WorkItem* Take();
  // Frees w's record and makes w available again. REQUIRES: w came from Take.
  void Recycle(WorkItem* w);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<WorkItem>> items_;  // guarded by mu_
  std::vector<WorkItem*> free_;                   // guarded by mu_
};

}  // namespace sluice

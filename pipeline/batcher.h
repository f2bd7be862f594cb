// The last stage: takes items in sequence order and turns them into batches. Each record was
// decoded straight into slot (position mod batch_size) of the input buffer (position /
// batch_size); while no record has failed, a full input buffer simply becomes the next batch with
// no copying. After a skipped record the images that follow move down (one memcpy each) into the
// batch being filled, which lives in the input buffer of its first image, so batches stay full and
// in order, the result is the same whatever the thread count, and input buffers that have been
// passed are given back at once. Serial: one call at a time.
#pragma once

#include <cstdint>
#include <deque>

#include "formats/status.h"
#include "pipeline/batch.h"
#include "pipeline/options.h"
#include "pipeline/stats.h"
#include "pipeline/work_item.h"

namespace sluice {

// Where the batcher's output goes.
class BatcherSink {
 public:
  virtual ~BatcherSink() = default;
  // A finished batch of `size` images in buffer; it accounts for `size` in-flight records.
  virtual void EmitBatch(BatchBuffer* buffer, int size, BatchPosition position,
                         uint64_t skipped) = 0;
  // The stream fails (policy FAIL, max_errors exceeded, or an epoch of nothing but bad records
  // when repeating forever). Called at most once.
  virtual void EmitError(Status status) = 0;
  // A buffer that will not become a batch.
  virtual void DropBuffer(BatchBuffer* buffer) = 0;
  // Records accounted to no batch (skipped, dropped remainder, markers).
  virtual void DropItems(uint64_t items) = 0;
};

class Batcher {
 public:
  // start: where the run begins (Pipeline::MakeIterator); its first epoch's batches are numbered
  // from start.index.
  Batcher(const ResolvedOptions& options, PipelineStats* stats, BatcherSink* sink,
          BatchPosition start = {});

  // REQUIRES: items arrive in sequence order. Does not take ownership of w.
  void Add(const WorkItem& w);

  bool failed() const { return failed_; }

 private:
  void AddRecord(const WorkItem& w);
  void Skip(const WorkItem& w);
  void EndEpoch(int64_t epoch);
  // Gives back input buffers before `index` that hold no batch.
  void PassInputsBefore(uint64_t index);
  void Fail(Status status);

  const ResolvedOptions& options_;
  PipelineStats* stats_;
  BatcherSink* sink_;
  const uint64_t batch_size_;

  // Input buffers the source assigned in this epoch and the batcher has not passed yet, by input
  // batch index from base_.
  std::deque<BatchBuffer*> inputs_;
  uint64_t base_ = 0;
  // The batch being filled: the input buffer of its first image, and how many it holds.
  BatchBuffer* dst_ = nullptr;
  int filled_ = 0;
  uint64_t skipped_ = 0;        // skipped while filling it
  int64_t out_index_ = 0;       // its index within the epoch
  int64_t end_record_ = 0;      // epoch_index + 1 of the last item seen in this epoch
  uint64_t epoch_images_ = 0;   // placed in this epoch
  uint64_t epoch_skipped_ = 0;
  uint64_t errors_ = 0;         // over the whole stream
  Status last_error_;
  bool failed_ = false;
};

}  // namespace sluice

// The last stage: takes items in sequence order and turns them into batches. Each record was
// decoded straight into slot (position mod batch_size) of buffer (position / batch_size); while no
// record has failed, a full buffer simply becomes the next batch with no copying. After a skipped
// record every later image moves down one place (one memcpy each), so batches stay full and in
// order and the result is the same whatever the thread count. Serial: one call at a time.
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
  // A finished batch: size images in buffer; items = records it accounted for.
  virtual void EmitBatch(BatchBuffer* buffer, int size, BatchPosition position, uint64_t items,
                         uint64_t skipped) = 0;
  // The stream fails (policy FAIL, or max_errors exceeded). Called at most once.
  virtual void EmitError(Status status) = 0;
  // A buffer that will not become a batch.
  virtual void DropBuffer(BatchBuffer* buffer) = 0;
  // Records accounted to no batch (dropped remainder, markers).
  virtual void DropItems(uint64_t items) = 0;
};

class Batcher {
 public:
  Batcher(const ResolvedOptions& options, PipelineStats* stats, BatcherSink* sink);

  // REQUIRES: items arrive in sequence order. Does not take ownership of w.
  void Add(const WorkItem& w);

  bool failed() const { return failed_; }

 private:
  void AddRecord(const WorkItem& w);
  void EndEpoch(int64_t epoch);
  BatchBuffer* InputBuffer(uint64_t index);

  const ResolvedOptions& options_;
  PipelineStats* stats_;
  BatcherSink* sink_;
  const uint64_t batch_size_;

  // Buffers the source assigned in this epoch, by input batch index from base_. A buffer
  // becomes the batch of the same index (output positions never run ahead of input positions).
  std::deque<BatchBuffer*> buffers_;
  uint64_t base_ = 0;
  uint64_t out_pos_ = 0;        // images placed in this epoch
  uint64_t items_ = 0;          // records accounted to the batch being filled
  uint64_t skipped_ = 0;        // of which skipped
  uint64_t errors_ = 0;         // over the whole stream
  bool failed_ = false;
};

}  // namespace sluice

// The source thread: for each epoch from the start position, the records of the RecordSource
// through the shuffle buffer into the graph, each once the in-flight window has room and with its
// batch buffer and slot assigned, then the epoch's end marker. A resumed run passes over the
// records before its start, so it emits exactly the records that followed them in the run it
// resumes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "pipeline/batch.h"
#include "pipeline/batch_pool.h"
#include "pipeline/epoch_warning_limiter.h"
#include "pipeline/in_flight_window.h"
#include "pipeline/notification.h"
#include "pipeline/options.h"
#include "pipeline/record_source.h"
#include "pipeline/shuffle_buffer.h"
#include "pipeline/stats.h"
#include "pipeline/work_item_pool.h"

namespace sluice {

class SourceLoop {
 public:
  // What the loop draws from and feeds; all outlive it.
  struct Parts {
    RecordSource* source = nullptr;
    WorkItemPool* items = nullptr;
    InFlightWindow* window = nullptr;
    BatchPool* batch_pool = nullptr;
    PipelineStats* stats = nullptr;
    // Set when the batcher has ended the run's first epoch, and when stopping. Waited for with
    // the DECODED cache only.
    Notification* first_epoch_done = nullptr;
    // Raised by the batcher at each epoch's end, cancelled when stopping. With equal shares the
    // source waits for it before the next epoch: the batcher may need pool buffers for padding
    // batches then, which the next epoch's records would otherwise hold.
    CountGate* epochs_ended = nullptr;
  };
  // emit hands one item to the graph; it must not block. stop: set (with the window and the pool
  // stopped, and first_epoch_done notified) to end Run early.
  SourceLoop(const ResolvedOptions& options, BatchPosition start, Parts parts,
             std::function<void(WorkItem*)> emit, const std::atomic<bool>* stop);

  SourceLoop(const SourceLoop&) = delete;
  SourceLoop& operator=(const SourceLoop&) = delete;

  // Emits every epoch's items and end markers; returns when done or stopped. Source thread only.
  void Run();

 private:
  // Emits the epoch's records; false when stopping.
  bool RunEpoch(int64_t epoch);
  // Emits x, or passes over it when a resumed run has not reached its start yet. False when
  // stopping.
  bool Pass(WorkItem* x, int64_t epoch);
  // Hands w to the graph once the in-flight window has room. False when stopping.
  bool Emit(WorkItem* w, int64_t epoch);
  bool stopping() const { return stop_->load(); }
  // Logs an epoch the shuffle's byte share capped, at most once a minute (EpochWarningLimiter).
  void WarnShuffleCapped(int64_t epoch);

  const ResolvedOptions& options_;
  const BatchPosition start_;
  const Parts parts_;
  const std::function<void(WorkItem*)> emit_;
  const std::atomic<bool>* const stop_;
  ShuffleBuffer shuffle_;

  uint64_t sequence_ = 0;
  uint64_t epoch_index_ = 0;
  uint64_t skip_base_ = 0;  // records passed over in this epoch
  BatchBuffer* current_buffer_ = nullptr;
  // The last shuffle-cap warning, and capped epochs since then that were not logged.
  EpochWarningLimiter cap_warnings_{"capped epochs"};
};

}  // namespace sluice

// The input pipeline: shards → interleaved records → [record cache] → shuffle → parse + fused
// decode/augment (oneTBB flow graph, `threads` workers) → [decoded cache] → in-order batches →
// bounded prefetch queue. A Pipeline is immutable options; each Iterator is one independent run.
//
//   ASSIGN_OR_RETURN(auto pipeline, Pipeline::Create(options));
//   ASSIGN_OR_RETURN(auto it, pipeline->MakeIterator());
//   Batch batch; bool end = false;
//   while (it->GetNext(&batch, &end).ok() && !end) Train(batch);
#pragma once

#include <functional>
#include <memory>

#include "formats/status.h"
#include "pipeline/batch.h"
#include "pipeline/options.h"
#include "pipeline/stats.h"
#include "sluice/v1/config.pb.h"

namespace sluice {

class Iterator {
 public:
  virtual ~Iterator() = default;
  // Blocks until the next batch is ready. *end_of_sequence = true (and no batch) when a finite
  // number of epochs is done; that is not an error. A failed stream (policy FAIL, too many errors)
  // returns the error, naming file and offset, here and on every later call. Thread-compatible:
  // one consumer at a time.
  virtual Status GetNext(Batch* batch, bool* end_of_sequence) = 0;
  // GetNext without waiting: *ready = false (and nothing else set) when no batch, end or error
  // is ready yet. For consumers that must not block, such as a gRPC reactor.
  virtual Status TryGetNext(Batch* batch, bool* end_of_sequence, bool* ready) = 0;
  // Called (on a pipeline thread, so it must not block) each time a batch, the end or an error
  // becomes ready. Set it before the first TryGetNext; it stays until the iterator is gone.
  virtual void SetReadyCallback(std::function<void()> callback) = 0;
  virtual StatsSnapshot Stats() const = 0;
  // Records skipped after the last batch handed out, which no batch's skipped() carries: set once
  // GetNext or TryGetNext has returned the end or an error, 0 before. Consumer only.
  virtual uint64_t SkippedAfterLastBatch() const = 0;
};

// What MakeIterator refuses of a start position: InvalidArgument for a negative field;
// FailedPrecondition for a shuffle_bytes that is not options.shuffle_budget_bytes at a nonzero
// end_record (the epoch's order was made with another share).
Status CheckResumePosition(const ResolvedOptions& options, BatchPosition start);

class Pipeline {
 public:
  // Resolves and checks options (see ResolveOptions); errors name the field.
  static Result<std::unique_ptr<Pipeline>> Create(const v1::PipelineOptions& options);
  static std::unique_ptr<Pipeline> FromResolved(ResolvedOptions options);

  const ResolvedOptions& options() const { return options_; }

  // Starts reading. Each iterator has its own threads, caches and buffers. `start` resumes a
  // stream: at epoch start.epoch, passing over its first start.end_record records (not decoded;
  // not even read where a file's record index can stand in, see RecordSource::SetLazyRecords)
  // and numbering batches from start.index, so the batches are exactly those that followed the
  // batch whose position was {epoch, index - 1, end_record}.
  Result<std::unique_ptr<Iterator>> MakeIterator(BatchPosition start = {}) const;

 private:
  explicit Pipeline(ResolvedOptions options) : options_(std::move(options)) {}
  const ResolvedOptions options_;
};

}  // namespace sluice

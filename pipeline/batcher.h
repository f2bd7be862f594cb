// The last stage: takes items in sequence order and turns them into batches. Each record was
// decoded straight into slot (position mod batch_size) of the input buffer (position /
// batch_size); while no record has failed, a full input buffer simply becomes the next batch with
// no copying. After a skipped record the images that follow move down (one memcpy each) into the
// batch being filled, which lives in the input buffer of its first image, so batches stay full and
// in order, the result is the same whatever the thread count, and input buffers that have been
// passed are given back at once. Serial: one call at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "pipeline/batch.h"
#include "pipeline/batch_mix.h"
#include "pipeline/epoch_warning_limiter.h"
#include "pipeline/options.h"
#include "pipeline/stats.h"
#include "pipeline/work_item.h"

namespace sluice {

// Where the batcher's output goes.
class BatcherSink {
 public:
  virtual ~BatcherSink() = default;
  // A finished batch of `size` images in buffer; it accounts for `size - padded` in-flight
  // records (its last `padded` samples repeat earlier ones: equal shares). skipped: records
  // skipped since the previous batch (possibly in the epoch before).
  virtual void EmitBatch(BatchBuffer* buffer, int size, BatchPosition position, uint64_t skipped,
                         int padded) = 0;
  // A free pool buffer for a batch of padding only; may wait for the consumer to give one back.
  // Null when the run is stopping.
  virtual BatchBuffer* AcquireBuffer() = 0;
  // The stream fails (policy FAIL, max_errors exceeded, an epoch with no record or not one
  // usable). Called at most once. skipped: records skipped since the last batch, which no batch
  // will carry.
  virtual void EmitError(Status status, uint64_t skipped) = 0;
  // A buffer that will not become a batch.
  virtual void DropBuffer(BatchBuffer* buffer) = 0;
  // Records accounted to no batch (skipped, dropped remainder, markers).
  virtual void DropItems(uint64_t items) = 0;
};

class Batcher {
 public:
  // start: where the run begins (Pipeline::MakeIterator); its first epoch's batches are numbered
  // from start.index. equal_batches > 0 (equal shares, options.equalizes()): every epoch yields
  // exactly that many full batches. Usable records after the last of them are dropped (counted in
  // PipelineStats::dropped_records); an epoch short of them is padded with copies of the first
  // samples this run produced in the epoch (up to batch_size kept; with none, zero images with
  // label 0 and record ids -1), marked 0 in the batch's valid mask (PipelineStats::padded_samples).
  // Under PAD the equal batches hold every counted record, so records dropped past them mean the
  // count from the files was short (a stale or wrong .idx, a file grown since): they are still
  // dropped (every shard must yield the same) but counted and warned of.
  // Padding follows the run: a run resumed mid-epoch repeats its own first samples, so only the
  // real samples and the mask are the same as in the run it resumes.
  Batcher(const ResolvedOptions& options, PipelineStats* stats, BatcherSink* sink,
          BatchPosition start = {}, int64_t equal_batches = 0);
  ~Batcher();

  // REQUIRES: items arrive in sequence order. Does not take ownership of w.
  void Add(const WorkItem& w);

  bool failed() const { return failed_; }
  // Records skipped since the last batch: after the last epoch, what the stream's end must
  // report since no batch carries them.
  uint64_t unreported_skips() const { return skipped_; }

 private:
  void AddRecord(const WorkItem& w);
  // Hands a finished batch to the sink, mixed first when the transform list has mixup or cutmix.
  void Emit(BatchBuffer* buffer, int size, BatchPosition position, uint64_t skipped, int padded);
  // Equal shares: copies w's sample into keep_ while it holds fewer than batch_size.
  void Keep(const WorkItem& w);
  // Fills dst_'s slots from filled_ to batch_size with padding and emits it.
  void EmitPadded(int64_t epoch);
  void Skip(const WorkItem& w);
  void EndEpoch(int64_t epoch);
  // Gives back input buffers before `index` that hold no batch.
  void PassInputsBefore(uint64_t index);
  void Fail(Status status);
  // Counts a skip's reason for the epoch's summary, among a few distinct ones.
  void CountReason(const WorkItem& w);
  // "44× reason; 3× other" for the epoch's most common reasons.
  std::string TopReasons() const;
  // Logs an epoch whose skips passed skip_warn_percent, at most once a minute
  // (EpochWarningLimiter).
  void WarnSkips(int64_t epoch, uint64_t seen, const std::string& reasons);
  // Logs a DROP epoch that skips left short of its equal batches, at most once a minute.
  void WarnPadded(int64_t epoch, uint64_t seen);
  // Logs a PAD epoch that read more records than its equal batches hold (the files' record count
  // was short), at most once a minute.
  void WarnShortCount(int64_t epoch);
  // Why an epoch saw no record at all: the files, or the shard's share of them, are empty.
  std::string NoRecordsCause() const;

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
  uint64_t skipped_ = 0;    // skipped since the last batch went out, whatever its epoch
  int64_t out_index_ = 0;   // its index within the epoch
  int64_t end_record_ = 0;  // epoch_index + 1 of the last item seen in this epoch
  // An item seen in this epoch left the shuffle buffer after its byte share had bound: the
  // order up to end_record_ depends on the share, which positions then carry.
  bool epoch_capped_ = false;
  int64_t ShuffleBytes() const { return epoch_capped_ ? options_.shuffle_budget_bytes : 0; }
  uint64_t epoch_images_ = 0;  // placed in this epoch
  uint64_t epoch_skipped_ = 0;
  uint64_t epoch_batches_ = 0;  // emitted in this epoch
  // The run's first epoch starts at start.end_record > 0: records before it were not seen.
  bool partial_epoch_ = false;
  // This epoch's skips by reason: grouped by status code and message without paths and numbers,
  // shown by the first record's message (its first clause, without file and offset); bounded.
  struct Reason {
    std::string group;
    std::string example;
    uint64_t count = 0;
  };
  std::vector<Reason> epoch_reasons_;
  uint64_t epoch_other_reasons_ = 0;  // skips whose reason did not fit in epoch_reasons_
  // The last skip-share warning, and epochs over the share since then that were not logged.
  EpochWarningLimiter skip_warnings_{"epochs over it"};
  // Equal shares (0: off): the batches every epoch yields.
  const int64_t equal_batches_;
  std::optional<BatchMixer> mixer_;  // with mixup or cutmix
  std::unique_ptr<BatchBuffer> keep_;  // the epoch's first samples, for padding; made on first use
  int kept_ = 0;                       // samples in keep_ from this epoch
  uint64_t epoch_padded_ = 0;          // padding samples emitted in this epoch
  uint64_t epoch_dropped_ = 0;         // usable records past the equal batches in this epoch
  EpochWarningLimiter pad_warnings_{"padded epochs"};
  EpochWarningLimiter short_count_warnings_{"epochs read past their count"};
  // The run's first epoch is numbered from start.index > 0 with start.end_record 0: its records
  // fill batches from that index on, so the epoch ends before start.index of them are read.
  bool index_without_records_ = false;
  uint64_t errors_ = 0;  // over the whole stream
  Status last_error_;
  bool failed_ = false;
};

}  // namespace sluice

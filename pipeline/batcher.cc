#include "pipeline/batcher.h"

#include <cstring>

namespace sluice {

Batcher::Batcher(const ResolvedOptions& options, PipelineStats* stats, BatcherSink* sink,
                 BatchPosition start)
    : options_(options),
      stats_(stats),
      sink_(sink),
      batch_size_(static_cast<uint64_t>(options.batch_size)),
      out_index_(start.index),
      end_record_(start.end_record) {}

void Batcher::Add(const WorkItem& w) {
  StageTimer timer(stats_->stage(Stage::kBatch));
  if (w.kind != WorkKind::kEpochEnd && w.slot == 0) inputs_.push_back(w.buffer);
  if (failed_) {
    // After a failure nothing more is delivered; give everything back.
    for (BatchBuffer* b : inputs_) {
      if (b != nullptr) sink_->DropBuffer(b);
    }
    inputs_.clear();
    sink_->DropItems(1);
    return;
  }
  if (w.kind == WorkKind::kEpochEnd) {
    EndEpoch(w.epoch);
    sink_->DropItems(1);
    return;
  }
  stats_->stage(Stage::kBatch).items.fetch_add(1, std::memory_order_relaxed);
  end_record_ = static_cast<int64_t>(w.epoch_index) + 1;
  PassInputsBefore(w.run_index / batch_size_);
  if (w.kind == WorkKind::kBadRecord || !w.status.ok()) {
    Skip(w);
  } else {
    AddRecord(w);
  }
}

void Batcher::PassInputsBefore(uint64_t index) {
  while (base_ < index && !inputs_.empty()) {
    BatchBuffer* b = inputs_.front();
    inputs_.pop_front();
    ++base_;
    if (b != nullptr && b != dst_) sink_->DropBuffer(b);  // dst_ leaves as a batch later
  }
}

void Batcher::Fail(Status status) {
  failed_ = true;
  for (BatchBuffer* b : inputs_) {
    if (b != nullptr && b != dst_) sink_->DropBuffer(b);
  }
  inputs_.clear();
  if (dst_ != nullptr) {
    sink_->DropBuffer(dst_);
    sink_->DropItems(static_cast<uint64_t>(filled_));
    dst_ = nullptr;
    filled_ = 0;
  }
  sink_->EmitError(std::move(status));
}

void Batcher::Skip(const WorkItem& w) {
  ++skipped_;
  ++epoch_skipped_;
  ++errors_;
  last_error_ = w.status;
  stats_->skipped.fetch_add(1, std::memory_order_relaxed);
  stats_->AddError(w.status.message());
  // A skipped record holds nothing: its place in the window is free again now.
  sink_->DropItems(1);
  const bool too_many =
      options_.max_errors > 0 && errors_ > static_cast<uint64_t>(options_.max_errors);
  if (options_.error_policy == ErrorPolicy::kFail) {
    Fail(w.status);
  } else if (too_many) {
    Fail(Status(w.status.code(), "more than max_errors = " + std::to_string(options_.max_errors) +
                                     " bad records; the last: " + w.status.message()));
  }
}

void Batcher::AddRecord(const WorkItem& w) {
  if (dst_ == nullptr) {
    // The new batch lives in this record's input buffer. Output slot i is then written by a
    // record at input position >= that buffer's slot i, whose own record has been placed already.
    dst_ = w.buffer;
    filled_ = 0;
  }
  if (dst_ != w.buffer || filled_ != w.slot) {
    std::memcpy(dst_->image(filled_), w.buffer->image(w.slot), dst_->image_bytes);
  }
  dst_->labels[filled_] = w.label;
  ++filled_;
  ++epoch_images_;
  if (static_cast<uint64_t>(filled_) == batch_size_) {
    sink_->EmitBatch(dst_, filled_, BatchPosition{w.epoch, out_index_++, end_record_}, skipped_);
    // If dst_ is still among the inputs it must not be dropped when passed: mark it gone.
    for (BatchBuffer*& b : inputs_) {
      if (b == dst_) b = nullptr;
    }
    dst_ = nullptr;
    filled_ = 0;
    skipped_ = 0;
  }
}

void Batcher::EndEpoch(int64_t epoch) {
  if (dst_ != nullptr) {
    if (!options_.drop_remainder) {
      sink_->EmitBatch(dst_, filled_, BatchPosition{epoch, out_index_, end_record_}, skipped_);
    } else {
      sink_->DropBuffer(dst_);
      sink_->DropItems(static_cast<uint64_t>(filled_));
    }
    for (BatchBuffer*& b : inputs_) {
      if (b == dst_) b = nullptr;
    }
  }
  for (BatchBuffer* b : inputs_) {
    if (b != nullptr) sink_->DropBuffer(b);
  }
  const bool nothing_usable = epoch_images_ == 0 && epoch_skipped_ > 0;
  inputs_.clear();
  base_ = 0;
  dst_ = nullptr;
  filled_ = 0;
  skipped_ = 0;
  out_index_ = 0;
  end_record_ = 0;
  epoch_images_ = 0;
  epoch_skipped_ = 0;
  stats_->epochs_done.fetch_add(1, std::memory_order_relaxed);
  if (nothing_usable && options_.epochs == 0) {
    // Repeating forever would skip the same records forever.
    Fail(Status(last_error_.code(), "no record of epoch " + std::to_string(epoch) +
                                        " could be used; the last error: " +
                                        last_error_.message()));
  }
}

}  // namespace sluice

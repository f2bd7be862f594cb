#include "pipeline/batcher.h"

#include <cstring>

namespace sluice {

Batcher::Batcher(const ResolvedOptions& options, PipelineStats* stats, BatcherSink* sink)
    : options_(options),
      stats_(stats),
      sink_(sink),
      batch_size_(static_cast<uint64_t>(options.batch_size)) {}

BatchBuffer* Batcher::InputBuffer(uint64_t index) { return buffers_[index - base_]; }

void Batcher::Add(const WorkItem& w) {
  StageTimer timer(stats_->stage(Stage::kBatch));
  if (failed_) {
    // After a failure nothing more is delivered; give everything back.
    if (w.kind != WorkKind::kEpochEnd && w.slot == 0 && w.buffer) sink_->DropBuffer(w.buffer);
    sink_->DropItems(1);
    return;
  }
  if (w.kind == WorkKind::kEpochEnd) {
    EndEpoch(w.epoch);
    sink_->DropItems(1);
    return;
  }
  AddRecord(w);
}

void Batcher::AddRecord(const WorkItem& w) {
  const uint64_t in_index = w.epoch_index / batch_size_;
  if (w.slot == 0) buffers_.push_back(w.buffer);  // the source starts buffers in order
  ++items_;
  stats_->stage(Stage::kBatch).items.fetch_add(1, std::memory_order_relaxed);

  if (w.kind == WorkKind::kBadRecord || !w.status.ok()) {
    ++skipped_;
    ++errors_;
    stats_->skipped.fetch_add(1, std::memory_order_relaxed);
    stats_->AddError(w.status.message());
    bool too_many = options_.max_errors > 0 && errors_ > static_cast<uint64_t>(options_.max_errors);
    if (options_.error_policy == ErrorPolicy::kFail || too_many) {
      failed_ = true;
      Status s = too_many ? Status(w.status.code(),
                                   "more than max_errors = " + std::to_string(options_.max_errors) +
                                       " bad records; the last: " + w.status.message())
                          : w.status;
      // Buffers not yet handed out go back now.
      for (BatchBuffer* b : buffers_) sink_->DropBuffer(b);
      buffers_.clear();
      sink_->DropItems(items_);
      items_ = 0;
      sink_->EmitError(std::move(s));
    }
    return;
  }

  const uint64_t out_index = out_pos_ / batch_size_;
  const int out_slot = static_cast<int>(out_pos_ % batch_size_);
  BatchBuffer* dst = InputBuffer(out_index);
  if (out_index != in_index || out_slot != w.slot) {
    std::memcpy(dst->image(out_slot), w.buffer->image(w.slot), dst->image_bytes);
  }
  dst->labels[out_slot] = w.label;
  ++out_pos_;
  if (out_pos_ % batch_size_ == 0) {
    sink_->EmitBatch(dst, static_cast<int>(batch_size_),
                     BatchPosition{w.epoch, static_cast<int64_t>(out_index)}, items_, skipped_);
    items_ = 0;
    skipped_ = 0;
    // Batches leave in index order, so the emitted buffer is always the oldest one held.
    buffers_.pop_front();
    ++base_;
  }
}

void Batcher::EndEpoch(int64_t epoch) {
  const uint64_t out_index = out_pos_ / batch_size_;
  const int partial = static_cast<int>(out_pos_ % batch_size_);
  size_t first_unused = 0;  // in buffers_
  if (partial > 0 && !options_.drop_remainder) {
    sink_->EmitBatch(InputBuffer(out_index), partial,
                     BatchPosition{epoch, static_cast<int64_t>(out_index)}, items_, skipped_);
    first_unused = 1;
  } else if (items_ > 0) {
    sink_->DropItems(items_);
  }
  for (size_t i = first_unused; i < buffers_.size(); ++i) sink_->DropBuffer(buffers_[i]);
  buffers_.clear();
  base_ = 0;
  out_pos_ = 0;
  items_ = 0;
  skipped_ = 0;
  stats_->epochs_done.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace sluice

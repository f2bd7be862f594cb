#include "pipeline/source_loop.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include "formats/seed.h"

namespace sluice {

SourceLoop::SourceLoop(const ResolvedOptions& options, BatchPosition start, Parts parts,
                       std::function<void(WorkItem*)> emit, const std::atomic<bool>* stop)
    : options_(options),
      start_(start),
      parts_(parts),
      emit_(std::move(emit)),
      stop_(stop),
      shuffle_(static_cast<size_t>(options.shuffle_buffer), options.shuffle_budget_bytes,
               options.max_held_record_bytes, &parts.stats->pool(Pool::kShuffleBuffer)) {}

void SourceLoop::Run() {
  for (int64_t epoch = start_.epoch; options_.epochs == 0 || epoch < options_.epochs; ++epoch) {
    if (!RunEpoch(epoch)) break;
    const bool empty = epoch_index_ == 0;
    WorkItem* marker = parts_.items->Take();
    marker->kind = WorkKind::kEpochEnd;
    if (!Emit(marker, epoch)) break;
    if (options_.cache == CacheKind::kDecoded && epoch == start_.epoch) {
      // The first epoch fills the DECODED cache from the decode workers. Waiting for its last
      // items (no consumer action needed: they are all emitted) lets epoch 1 find every file
      // complete and skip its I/O and decode, instead of re-reading the last few files.
      parts_.first_epoch_done->WaitForNotification();
    }
    if (options_.equalizes() &&
        !parts_.epochs_ended->WaitFor(static_cast<uint64_t>(epoch - start_.epoch + 1))) {
      break;
    }
    // A data set with no records would otherwise repeat nothing forever.
    if (empty) break;
  }
  while (WorkItem* x = shuffle_.Drain()) parts_.items->Recycle(x);
}

bool SourceLoop::RunEpoch(int64_t epoch) {
  RecordSource& source = *parts_.source;
  source.StartEpoch(epoch);
  shuffle_.StartEpoch(MixSeed(options_.shuffle_seed,
                              options_.reshuffle_each_epoch ? static_cast<uint64_t>(epoch) : 0));
  epoch_index_ = 0;
  skip_base_ = epoch == start_.epoch ? static_cast<uint64_t>(start_.end_record) : 0;
  // Records a resumed run passes over need not be read where the record index finds them.
  source.SetLazyRecords(skip_base_);
  // False once Pass fails (stopping): nothing more is read.
  bool ok = true;
  while (ok && !stopping()) {
    WorkItem* w = parts_.items->Take();
    bool end = false;
    source.Next(w, &end);
    if (end) {
      parts_.items->Recycle(w);
      while (WorkItem* x = shuffle_.Drain()) {
        if (!Pass(x, epoch)) break;
      }
      break;
    }
    bool taken = false;
    while (ok && !taken) {
      WorkItem* x = shuffle_.Push(w, &taken);
      if (x != nullptr) ok = Pass(x, epoch);
    }
    if (!taken) parts_.items->Recycle(w);
  }
  if (shuffle_.capped() > 0) {
    parts_.stats->shuffle_capped.fetch_add(shuffle_.capped(), std::memory_order_relaxed);
    WarnShuffleCapped(epoch);
  }
  return !stopping();
}

void SourceLoop::WarnShuffleCapped(int64_t epoch) {
  const std::optional<std::string> since = cap_warnings_.Admit();
  if (!since) return;
  parts_.stats->Warn(options_.name + ": epoch " + std::to_string(epoch) +
                     ": the shuffle buffer held " + std::to_string(shuffle_.most_held()) +
                     " records at most of buffer_size " + std::to_string(options_.shuffle_buffer) +
                     ": its byte share " + std::to_string(options_.shuffle_budget_bytes) +
                     " is full; raise memory_budget_bytes for a fuller shuffle" + *since);
}

bool SourceLoop::Pass(WorkItem* x, int64_t epoch) {
  x->fatal = false;
  x->shuffle_capped = shuffle_.capped() > 0;
  if (epoch_index_ < skip_base_) {
    // A start position without the share (shuffle_bytes 0: the run it resumes was not capped
    // before it, or the position was made by hand) is exact only while this run is not capped
    // either before it. (A non-zero share was checked equal to this job's at start.)
    if (!x->shuffle_capped || start_.shuffle_bytes != 0) {
      ++epoch_index_;
      parts_.items->Recycle(x);
      return true;
    }
    x->kind = WorkKind::kBadRecord;
    x->fatal = true;
    x->status = FailedPrecondition(
        "cannot resume at end_record " + std::to_string(skip_base_) + " of epoch " +
        std::to_string(epoch) + " exactly: this job's shuffle share of " +
        std::to_string(options_.shuffle_budget_bytes) +
        " bytes fills before that record, so the epoch's order up to it depends on the share, and "
        "start_position.shuffle_bytes is 0 (the run it resumes was not capped there, or the "
        "position was made without it); resume with the start_position of a batch as it came, "
        "with the memory_budget_bytes, batch and image size, prefetch and cache of that run, or "
        "start the epoch over");
    skip_base_ = epoch_index_;  // what follows is emitted (and dropped: the stream has failed)
  }
  if (!x->fatal && x->lazy_length > 0) parts_.source->Materialize(x);
  return Emit(x, epoch);
}

bool SourceLoop::Emit(WorkItem* w, int64_t epoch) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  if (!parts_.window->Acquire(w->held_bytes())) {
    parts_.items->Recycle(w);
    return false;
  }
  parts_.stats->stage(Stage::kRead)
      .blocked_ns.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
          std::memory_order_relaxed);
  w->sequence = sequence_++;
  w->epoch = epoch;
  if (w->kind != WorkKind::kEpochEnd) {
    w->epoch_index = epoch_index_++;
    w->run_index = w->epoch_index - skip_base_;
    w->slot = static_cast<int>(w->run_index % static_cast<uint64_t>(options_.batch_size));
    if (w->slot == 0) {
      current_buffer_ = parts_.batch_pool->Acquire();
      if (current_buffer_ == nullptr) {  // stopping
        parts_.window->ReleaseItems(1);
        parts_.window->ReleaseBytes(w->held_bytes());
        parts_.items->Recycle(w);
        return false;
      }
    }
    w->buffer = current_buffer_;
  } else {
    w->buffer = nullptr;
  }
  parts_.stats->pool(Pool::kRecordsInFlight).Add(w->held_bytes());
  emit_(w);
  return true;
}

}  // namespace sluice

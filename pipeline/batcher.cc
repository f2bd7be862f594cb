#include "pipeline/batcher.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <string_view>

namespace sluice {
namespace {

// Copies a sample's features into `to`'s slot: copy-assigned, so the slot's buffers keep their
// capacity, within the reserve the batch pool accounts the slot at.
void CopyFeatures(const SampleFeatures& from, BatchBuffer* to, int slot) {
  SampleFeatures& f = to->features[static_cast<size_t>(slot)];
  f = from;
  f.TrimTo(to->feature_slot_bytes);
}

// Distinct skip reasons an epoch keeps apart; later new ones are counted together.
constexpr size_t kMaxReasons = 8;
constexpr size_t kMaxReasonChars = 160;

// At most one skip warning per this long, naming the epochs over the share since the last one:
// with epochs: 0 a bad dataset would otherwise log every epoch forever.

// What went wrong with a record, as shown: the message without the "file:offset: " context in
// front and without the per-record details after the first "; ".
std::string ShownReason(const WorkItem& w, const std::string& path) {
  std::string_view m = w.status.message();
  const std::string context = path + ":" + std::to_string(w.offset) + ": ";
  if (m.starts_with(context)) m.remove_prefix(context.size());
  m = m.substr(0, m.find("; "));
  return std::string(m.substr(0, kMaxReasonChars));
}

// What groups skips: the status code and the shown reason with what differs from record to
// record taken out — paths (any word with a '/') become "<file>", numbers (decimal or 0x hex)
// "N" — so "corrupted record at /a/b:12 (…)" and "…/a/c:99 (…)" are one reason.
std::string GroupOf(StatusCode code, std::string_view shown) {
  std::string key = std::to_string(static_cast<int>(code)) + ":";
  size_t i = 0;
  while (i < shown.size()) {
    if (i == 0 || shown[i - 1] == ' ') {
      const size_t end = std::min(shown.find(' ', i), shown.size());
      if (shown.substr(i, end - i).find('/') != std::string_view::npos) {
        key += "<file>";
        i = end;
        continue;
      }
    }
    const char c = shown[i];
    if (c < '0' || c > '9') {
      key += c;
      ++i;
      continue;
    }
    if (c == '0' && i + 1 < shown.size() && (shown[i + 1] == 'x' || shown[i + 1] == 'X')) i += 2;
    while (i < shown.size() && std::isxdigit(static_cast<unsigned char>(shown[i]))) ++i;
    key += 'N';
  }
  return key;
}

}  // namespace

Batcher::Batcher(const ResolvedOptions& options, PipelineStats* stats, BatcherSink* sink,
                 BatchPosition start, int64_t equal_batches)
    : options_(options),
      stats_(stats),
      sink_(sink),
      batch_size_(static_cast<uint64_t>(options.batch_size)),
      out_index_(start.index),
      end_record_(start.end_record),
      partial_epoch_(start.end_record > 0),
      equal_batches_(equal_batches),
      index_without_records_(start.index > 0 && start.end_record == 0) {
  if (options.transforms.mixes_labels()) mixer_.emplace(options.transforms, options.seed);
}

Batcher::~Batcher() {
  if (keep_) stats_->pool(Pool::kBatchPool).Remove(static_cast<int64_t>(keep_->bytes()));
}

void Batcher::Emit(BatchBuffer* buffer, int size, BatchPosition position, uint64_t skipped,
                   int padded) {
  if (mixer_) mixer_->Mix(buffer, size, position.epoch, position.index);
  sink_->EmitBatch(buffer, size, position, skipped, padded);
}

void Batcher::Keep(const WorkItem& w) {
  if (static_cast<uint64_t>(kept_) >= batch_size_) return;
  if (!keep_) {
    // Accounted with the batch pool: the memory budget holds one batch more for it
    // (ResolveOptions).
    keep_ = std::make_unique<BatchBuffer>(
        options_.batch_size, options_.height, options_.width, false, options_.record_ids,
        options_.transforms.output.dtype, options_.transforms.output.layout, /*with_mix=*/false,
        options_.features.array_count(), options_.features.slot_bytes());
    PoolCounters& pool = stats_->pool(Pool::kBatchPool);
    pool.limit += static_cast<int64_t>(keep_->bytes());
    pool.Add(static_cast<int64_t>(keep_->bytes()));
  }
  std::memcpy(keep_->image(kept_), w.buffer->image(w.slot), keep_->image_bytes);
  keep_->labels[kept_] = w.label;
  if (!keep_->features.empty()) CopyFeatures(w.buffer->features[w.slot], keep_.get(), kept_);
  if (keep_->record_files) {
    keep_->record_files[kept_] = static_cast<int32_t>(w.file);
    keep_->record_indexes[kept_] = static_cast<int64_t>(w.record);
  }
  ++kept_;
}

void Batcher::EmitPadded(int64_t epoch) {
  const int real = filled_;
  for (int i = 0; i < real; ++i) dst_->valid[i] = 1;
  for (int i = real; static_cast<uint64_t>(i) < batch_size_; ++i) {
    dst_->valid[i] = 0;
    if (kept_ > 0) {
      // Repeats the epoch's first samples in order, as PyTorch's DistributedSampler pads.
      const int k = static_cast<int>(epoch_padded_ % static_cast<uint64_t>(kept_));
      std::memcpy(dst_->image(i), keep_->image(k), dst_->image_bytes);
      dst_->labels[i] = keep_->labels[k];
      if (!dst_->features.empty()) CopyFeatures(keep_->features[k], dst_, i);
      if (dst_->record_files) {
        dst_->record_files[i] = keep_->record_files[k];
        dst_->record_indexes[i] = keep_->record_indexes[k];
      }
    } else {
      // A run resumed inside the padding has seen no sample of the epoch to repeat.
      std::memset(dst_->image(i), 0, dst_->image_bytes);
      dst_->labels[i] = 0;
      if (!dst_->features.empty()) dst_->features[i].SetEmpty(options_.features);
      if (dst_->record_files) {
        dst_->record_files[i] = -1;
        dst_->record_indexes[i] = -1;
      }
    }
    ++epoch_padded_;
  }
  const int padded = static_cast<int>(batch_size_) - real;
  stats_->padded_samples.fetch_add(static_cast<uint64_t>(padded), std::memory_order_relaxed);
  Emit(dst_, static_cast<int>(batch_size_),
       BatchPosition{epoch, out_index_++, end_record_, ShuffleBytes()}, skipped_, padded);
  ++epoch_batches_;
  skipped_ = 0;
  for (BatchBuffer*& b : inputs_) {
    if (b == dst_) b = nullptr;
  }
  dst_ = nullptr;
  filled_ = 0;
}

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
  epoch_capped_ = epoch_capped_ || w.shuffle_capped;
  PassInputsBefore(w.run_index / batch_size_);
  if (w.fatal) {
    sink_->DropItems(1);
    Fail(w.status);
  } else if (w.kind == WorkKind::kBadRecord || !w.status.ok()) {
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
  sink_->EmitError(std::move(status), skipped_);
}

void Batcher::CountReason(const WorkItem& w) {
  std::string shown = ShownReason(w, options_.files[w.file]);
  const std::string group = GroupOf(w.status.code(), shown);
  for (Reason& r : epoch_reasons_) {
    if (r.group == group) {
      ++r.count;
      return;
    }
  }
  if (epoch_reasons_.size() < kMaxReasons) {
    epoch_reasons_.push_back(Reason{group, std::move(shown), 1});
  } else {
    ++epoch_other_reasons_;
  }
}

std::string Batcher::TopReasons() const {
  auto reasons = epoch_reasons_;
  std::stable_sort(reasons.begin(), reasons.end(),
                   [](const Reason& a, const Reason& b) { return a.count > b.count; });
  std::string out;
  for (size_t i = 0; i < reasons.size() && i < 3; ++i) {
    if (!out.empty()) out += "; ";
    out += std::to_string(reasons[i].count) + "x " + reasons[i].example;
  }
  uint64_t rest = epoch_other_reasons_;
  for (size_t i = 3; i < reasons.size(); ++i) rest += reasons[i].count;
  if (rest > 0) out += "; " + std::to_string(rest) + "x other reasons";
  return out;
}

void Batcher::Skip(const WorkItem& w) {
  ++skipped_;
  ++epoch_skipped_;
  ++errors_;
  last_error_ = w.status;
  stats_->skipped.fetch_add(1, std::memory_order_relaxed);
  stats_->AddError(w.status.message());
  CountReason(w);
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
  if (equal_batches_ > 0) {
    if (out_index_ >= equal_batches_) {
      // Past the epoch's equal share: usable, but dropped so every shard yields the same.
      ++epoch_images_;
      ++epoch_dropped_;
      stats_->dropped_records.fetch_add(1, std::memory_order_relaxed);
      sink_->DropItems(1);
      return;
    }
    Keep(w);
  }
  if (dst_ == nullptr) {
    // The new batch lives in this record's input buffer. Output slot i is then written by a
    // record at input position >= that buffer's slot i, whose own record has been placed already.
    dst_ = w.buffer;
    filled_ = 0;
  }
  if (dst_ != w.buffer || filled_ != w.slot) {
    std::memcpy(dst_->image(filled_), w.buffer->image(w.slot), dst_->image_bytes);
    if (!dst_->features.empty()) CopyFeatures(w.buffer->features[w.slot], dst_, filled_);
  }
  dst_->labels[filled_] = w.label;
  if (dst_->record_files) {
    dst_->record_files[filled_] = static_cast<int32_t>(w.file);
    dst_->record_indexes[filled_] = static_cast<int64_t>(w.record);
  }
  ++filled_;
  ++epoch_images_;
  if (static_cast<uint64_t>(filled_) == batch_size_) {
    Emit(dst_, filled_, BatchPosition{w.epoch, out_index_++, end_record_, ShuffleBytes()},
         skipped_, 0);
    ++epoch_batches_;
    // If dst_ is still among the inputs it must not be dropped when passed: mark it gone.
    for (BatchBuffer*& b : inputs_) {
      if (b == dst_) b = nullptr;
    }
    dst_ = nullptr;
    filled_ = 0;
    skipped_ = 0;
  }
}

std::string Batcher::NoRecordsCause() const {
  const uint64_t files = options_.files.size();
  const std::string of_files = std::to_string(files) + (files == 1 ? " file" : " files");
  if (options_.shard_count <= 1) return "the " + of_files + " hold none";
  const std::string shard = "shard " + std::to_string(options_.shard_index) + " of " +
                            std::to_string(options_.shard_count) + " holds no records: ";
  const std::string rule =
      " % " + std::to_string(options_.shard_count) + " == " + std::to_string(options_.shard_index);
  if (files >= static_cast<uint64_t>(options_.shard_count)) {
    return shard + "the files it takes (file i with i" + rule + ", of the dataset's " + of_files +
           ") are empty";
  }
  return shard + "the dataset has fewer files than shards, so each shard takes from every file " +
         "the records r with r" + rule + ", and none of the " + of_files + " holds more than " +
         std::to_string(options_.shard_index) + " records";
}

void Batcher::WarnSkips(int64_t epoch, uint64_t seen, const std::string& reasons) {
  const std::optional<std::string> since = skip_warnings_.Admit();
  if (!since) return;
  stats_->Warn(options_.name + ": epoch " + std::to_string(epoch) + " skipped " +
               std::to_string(epoch_skipped_) + " of " + std::to_string(seen) + " records (" +
               std::to_string(epoch_skipped_ * 100 / seen) + "%, over skip_warn_percent " +
               std::to_string(options_.skip_warn_percent) + "%): " + reasons + *since);
}

void Batcher::WarnPadded(int64_t epoch, uint64_t seen) {
  const std::optional<std::string> since = pad_warnings_.Admit();
  if (!since) return;
  stats_->Warn(options_.name + ": epoch " + std::to_string(epoch) + " of shard " +
               std::to_string(options_.shard_index) + " of " +
               std::to_string(options_.shard_count) + " had " + std::to_string(epoch_images_) +
               " usable records of its " + std::to_string(seen) + " (" +
               std::to_string(epoch_skipped_) + " skipped), short of the " +
               std::to_string(equal_batches_) + " equal batches of " + std::to_string(batch_size_) +
               ": padded with " + std::to_string(epoch_padded_) +
               " repeated samples, marked invalid" + *since);
}

void Batcher::WarnShortCount(int64_t epoch) {
  const std::optional<std::string> since = short_count_warnings_.Admit();
  if (!since) return;
  stats_->Warn(options_.name + ": epoch " + std::to_string(epoch) + " of shard " +
               std::to_string(options_.shard_index) + " of " +
               std::to_string(options_.shard_count) + " read " + std::to_string(epoch_dropped_) +
               " more records than its " + std::to_string(equal_batches_) + " equal batches of " +
               std::to_string(batch_size_) +
               " hold (equal_shares PAD): the record count from the files was short, probably a "
               "stale or wrong .idx (rebuild it with `sluice index`) or a file that grew since; "
               "those records were dropped (dropped_records)" +
               *since);
}

void Batcher::EndEpoch(int64_t epoch) {
  if (equal_batches_ > 0 && dst_ != nullptr) {
    EmitPadded(epoch);
  } else if (dst_ != nullptr) {
    if (!options_.drop_remainder) {
      Emit(dst_, filled_, BatchPosition{epoch, out_index_, end_record_, ShuffleBytes()},
           skipped_, 0);
      ++epoch_batches_;
      skipped_ = 0;
    } else {
      // The dropped records were usable: they are no skips. Skips while filling them stay in
      // skipped_ for the next batch (or the stream's end) to report.
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
  inputs_.clear();
  // Equal shares: batches of padding only, in buffers the inputs just gave back; not for an
  // epoch that fails below (nothing read, or nothing usable).
  const bool fails = !partial_epoch_ && epoch_images_ == 0;
  while (!fails && out_index_ < equal_batches_) {
    dst_ = sink_->AcquireBuffer();
    if (dst_ == nullptr) return;  // stopping
    filled_ = 0;
    EmitPadded(epoch);
  }
  const uint64_t seen = epoch_images_ + epoch_skipped_;
  const bool nothing_usable = epoch_images_ == 0 && epoch_skipped_ > 0 && !partial_epoch_;
  const bool no_records = seen == 0 && !partial_epoch_;
  // Usable records, but too few for one batch: with drop_remainder the epoch yields nothing.
  const bool no_batch = epoch_images_ > 0 && epoch_batches_ == 0 && !partial_epoch_;
  const uint64_t usable = epoch_images_;
  const bool too_many_skips =
      epoch_skipped_ * 100 > static_cast<uint64_t>(options_.skip_warn_percent) * seen;
  std::string reasons;
  if (too_many_skips || nothing_usable) reasons = TopReasons();
  if (too_many_skips) WarnSkips(epoch, seen, reasons);
  if (options_.equal_shares == EqualShares::kDrop && epoch_padded_ > 0 && !partial_epoch_) {
    WarnPadded(epoch, seen);
  }
  if (options_.equal_shares == EqualShares::kPad && epoch_dropped_ > 0 && !index_without_records_) {
    WarnShortCount(epoch);
  }
  // Every usable record fell past the equal batches: the run started at or after the last of
  // them (and, with no batch emitted, out_index_ is still where it started).
  const bool past_equal_batches = no_batch && equal_batches_ > 0 && epoch_dropped_ == usable;
  const int64_t start_index = out_index_;
  base_ = 0;
  dst_ = nullptr;
  filled_ = 0;
  out_index_ = 0;
  end_record_ = 0;
  epoch_capped_ = false;
  epoch_images_ = 0;
  epoch_skipped_ = 0;
  epoch_batches_ = 0;
  kept_ = 0;
  epoch_padded_ = 0;
  epoch_dropped_ = 0;
  index_without_records_ = false;
  partial_epoch_ = false;
  epoch_reasons_.clear();
  epoch_other_reasons_ = 0;
  stats_->epochs_done.fetch_add(1, std::memory_order_relaxed);
  if (no_records) {
    // Empty files, or a shard that got none of them: a stream of nothing, as below.
    Fail(FailedPrecondition("epoch " + std::to_string(epoch) +
                            " has no records: " + NoRecordsCause()));
  } else if (past_equal_batches) {
    Fail(FailedPrecondition(
        "epoch " + std::to_string(epoch) + " yields no batch: it starts at batch index " +
        std::to_string(start_index) + " (start_position.index), not before its " +
        std::to_string(equal_batches_) + " equal batches (equal_shares), so all its " +
        std::to_string(usable) + " usable records fell past them; start at an index below " +
        std::to_string(equal_batches_)));
  } else if (no_batch) {
    // Finite or not, a stream that never yields is no success: with epochs: 0 it would decode
    // the same records forever.
    Fail(FailedPrecondition(
        "epoch " + std::to_string(epoch) + " yields no batch: its " + std::to_string(usable) +
        " usable records < batch_size " + std::to_string(batch_size_) + " with drop_remainder" +
        (seen > usable ? " (" + std::to_string(seen - usable) + " more skipped)" : "")));
  } else if (nothing_usable) {
    // Whatever the number of epochs: a stream of nothing is a mistake (wrong keys, wrong files)
    // the user must hear of, and repeating forever would skip the same records forever.
    Fail(Status(last_error_.code(), "no record of epoch " + std::to_string(epoch) +
                                        " could be used (all " + std::to_string(seen) +
                                        " skipped): " + reasons +
                                        "; the last: " + last_error_.message()));
  }
}

}  // namespace sluice

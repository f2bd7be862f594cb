#include "pipeline/record_source.h"

#include <algorithm>
#include <random>

#include "formats/seed.h"
#include "pipeline/cache_sources.h"
#include "pipeline/file_reader_source.h"

namespace sluice {

RecordSource::RecordSource(const ResolvedOptions& options, PipelineStats* stats,
                           RecordCache* record_cache, DecodedCache* decoded_cache, IoPool* io_pool)
    : options_(options), plan_(PlanSharding(options)), ctx_{&options,      stats,
                                                            io_pool,       record_cache,
                                                            decoded_cache, plan_.records} {}

// Sources of files not read to their end give back their buffers and reservations here.
RecordSource::~RecordSource() = default;

void RecordSource::StartEpoch(int64_t epoch) {
  cycle_.clear();
  pos_ = 0;
  taken_ = 0;
  next_file_ = 0;
  lazy_ = LazyWindow{};
  order_ = plan_.files;
  if (options_.shuffle_files) {
    std::mt19937_64 rng(MixSeed(options_.seed, options_.reshuffle_each_epoch ? 1000 + epoch : 999));
    std::shuffle(order_.begin(), order_.end(), rng);
  }
}

RecordSource::Slot RecordSource::Open(uint32_t file) const {
  Slot slot;
  slot.file = file;
  if (ctx_.decoded_cache != nullptr && ctx_.decoded_cache->Complete(file)) {
    slot.source = std::make_unique<DecodedCacheSource>(ctx_, file);
  } else if (ctx_.record_cache != nullptr) {
    if (const auto* records = ctx_.record_cache->Find(file)) {
      slot.source = std::make_unique<RecordCacheSource>(ctx_, records);
    }
    // Otherwise read from disk on its first turn, filling the cache.
  }
  return slot;
}

std::unique_ptr<Source> RecordSource::OpenFromDisk(uint32_t file) const {
  // The index stands in for reading what this stream will not use: the other ranks' records of a
  // file the ranks share, and the records a resumed stream passes over (not while filling the
  // record cache, which keeps them all: a lazy record holds no bytes to keep).
  const bool fill = ctx_.record_cache != nullptr;
  if (fill ? plan_.records.count > 1 : plan_.records.count > 1 || lazy_.open()) {
    if (auto index = RecordIndexSource::Open(ctx_, file, &lazy_, fill)) return index;
  }
  // The cache is filled as the file is read; the reader opens on the first read.
  return std::make_unique<FileReaderSource>(ctx_, file, fill);
}

bool RecordSource::Read(Slot& slot, WorkItem* w) {
  StageTimer timer(ctx_.stats->stage(Stage::kRead));
  w->kind = WorkKind::kRecord;
  w->file = slot.file;
  w->cached = nullptr;
  w->status = Status::OK();
  w->owned.clear();
  w->bytes = {};
  w->lazy_length = 0;
  if (!slot.source) slot.source = OpenFromDisk(slot.file);
  return slot.source->Read(w);
}

void RecordSource::Next(WorkItem* w, bool* end_of_epoch) {
  *end_of_epoch = false;
  for (;;) {
    while (cycle_.size() < static_cast<size_t>(options_.cycle_length) &&
           next_file_ < order_.size()) {
      cycle_.push_back(Open(order_[next_file_++]));
    }
    if (cycle_.empty()) {
      *end_of_epoch = true;
      return;
    }
    if (pos_ >= cycle_.size()) pos_ = 0;
    if (Read(cycle_[pos_], w)) {
      ++lazy_.produced;
      if (++taken_ >= options_.block_length) {
        taken_ = 0;
        pos_ = (pos_ + 1) % cycle_.size();
      }
      return;
    }
    // This file is done: the next file takes its place in the cycle, as in tf.data.
    taken_ = 0;
    if (next_file_ < order_.size()) {
      cycle_[pos_] = Open(order_[next_file_++]);
    } else {
      cycle_.erase(cycle_.begin() + static_cast<ptrdiff_t>(pos_));
    }
  }
}

void RecordSource::Materialize(WorkItem* w) {
  if (options_.kinds[w->file] == SourceKind::kTar) {
    MaterializeLazySample(options_.files[w->file], RecordReaderOptionsFor(options_, w->file),
                          ctx_.stats, w);
    return;
  }
  MaterializeLazyRecord(options_.files[w->file],
                        static_cast<uint64_t>(options_.max_held_record_bytes), ctx_.stats, w);
}

}  // namespace sluice

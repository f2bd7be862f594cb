#include "pipeline/record_source.h"

#include <algorithm>
#include <random>

#include "formats/seed.h"
#include "formats/file.h"
#include "formats/record_index.h"
#include "pipeline/read_ahead_file.h"

namespace sluice {

// One open file of the interleave cycle, served from disk, the record cache or the decoded cache.
struct RecordSource::Cursor {
  uint32_t file = 0;
  std::unique_ptr<TFRecordReader> reader;                  // from disk
  const std::vector<RecordCache::Record>* cached = nullptr;  // from the record cache
  size_t cached_pos = 0;
  bool decoded = false;     // every record is in the decoded cache
  uint64_t next_record = 0; // record number of the next record in the file
  bool done = false;
  bool clean = true;        // read to the end without damage
  // Filling the record cache while reading from disk.
  bool caching = false;
  std::vector<RecordCache::Record> pending;
  int64_t pending_bytes = 0;
  // Passing over records unread (SetLazyRecords): the file's index and the next entry in it.
  bool lazy_checked = false;
  bool lazy = false;
  std::vector<IndexEntry> index;
  size_t index_pos = 0;
  uint64_t start_offset = 0;  // where the reader starts after the lazy part
};

RecordSource::RecordSource(const ResolvedOptions& options, PipelineStats* stats,
                           RecordCache* record_cache, DecodedCache* decoded_cache,
                           IoPool* io_pool)
    : options_(options),
      stats_(stats),
      record_cache_(record_cache),
      decoded_cache_(decoded_cache),
      io_pool_(io_pool) {
  const uint32_t n = static_cast<uint32_t>(options.files.size());
  if (options.shard_count > 1 && n >= static_cast<uint32_t>(options.shard_count)) {
    // Enough files: each shard reads whole files, i ≡ index (mod count), in the sorted order
    // every worker computes the same way.
    for (uint32_t i = options.shard_index; i < n; i += options.shard_count) my_files_.push_back(i);
  } else {
    for (uint32_t i = 0; i < n; ++i) my_files_.push_back(i);
    record_shard_index_ = options.shard_index;
    record_shard_count_ = options.shard_count;
  }
}

RecordSource::~RecordSource() { DropCycle(); }

void RecordSource::DropCycle() {
  for (auto& c : cycle_) {
    if (c && c->caching) record_cache_->Unreserve(c->pending_bytes);
    if (c && c->reader) stats_->pool(Pool::kReadBuffers).Remove(kReadBufferBytes);
  }
  cycle_.clear();
}

void RecordSource::StartEpoch(int64_t epoch) {
  DropCycle();
  pos_ = 0;
  taken_ = 0;
  next_file_ = 0;
  produced_ = 0;
  lazy_until_ = 0;
  order_ = my_files_;
  if (options_.shuffle_files) {
    std::mt19937_64 rng(MixSeed(options_.seed, options_.reshuffle_each_epoch ? 1000 + epoch : 999));
    std::shuffle(order_.begin(), order_.end(), rng);
  }
}

std::unique_ptr<RecordSource::Cursor> RecordSource::Open(uint32_t file) {
  auto c = std::make_unique<Cursor>();
  c->file = file;
  if (decoded_cache_ && decoded_cache_->Complete(file)) {
    c->decoded = true;
    return c;
  }
  if (record_cache_) {
    c->cached = record_cache_->Find(file);
    if (c->cached) return c;
    c->caching = true;
  }
  return c;  // the reader opens on first read, so its errors surface in order
}

void RecordSource::Finish(Cursor& c) {
  c.done = true;
  if (c.reader) {
    stats_->pool(Pool::kReadBuffers).Remove(kReadBufferBytes);
    c.reader.reset();
  }
  if (c.caching) {
    if (c.clean) {
      record_cache_->Commit(c.file, std::move(c.pending), c.pending_bytes);
    } else {
      record_cache_->Unreserve(c.pending_bytes);
    }
    c.caching = false;
    c.pending_bytes = 0;
  }
  if (decoded_cache_ && c.clean && c.next_record > 0) {
    decoded_cache_->SetRecordCount(c.file, c.next_record);
  }
}

bool RecordSource::Read(Cursor& c, WorkItem* w) {
  StageTimer timer(stats_->stage(Stage::kRead));
  w->kind = WorkKind::kRecord;
  w->file = c.file;
  w->cached = nullptr;
  w->status = Status::OK();
  w->owned.clear();
  w->bytes = {};
  w->lazy_length = 0;
  if (c.done) return false;

  if (c.decoded) {
    // Every record of this file is a decoded-cache entry: no I/O, no parse.
    const auto total = static_cast<uint64_t>(decoded_cache_->RecordCount(c.file));
    while (c.next_record < total) {
      uint64_t index = c.next_record++;
      if (index % static_cast<uint64_t>(record_shard_count_) !=
          static_cast<uint64_t>(record_shard_index_)) {
        continue;
      }
      const CachedImage* img = decoded_cache_->Find(c.file, index);
      w->record = index;
      w->cached = img;
      w->offset = img->offset;
      stats_->stage(Stage::kRead).items.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    c.done = true;
    return false;
  }

  if (c.cached) {
    if (c.cached_pos >= c.cached->size()) {
      c.done = true;
      return false;
    }
    const RecordCache::Record& r = (*c.cached)[c.cached_pos++];
    w->record = r.index;
    w->offset = r.offset;
    w->bytes = r.bytes;
    stats_->stage(Stage::kRead).items.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  auto mine = [this](uint64_t index) {
    return record_shard_count_ == 1 || index % static_cast<uint64_t>(record_shard_count_) ==
                                           static_cast<uint64_t>(record_shard_index_);
  };
  if (!c.reader && !c.lazy_checked) {
    c.lazy_checked = true;
    c.lazy = produced_ < lazy_until_ && record_cache_ == nullptr && LoadIndex(c);
  }
  if (c.lazy) {
    if (produced_ < lazy_until_) {
      while (c.index_pos < c.index.size()) {
        const IndexEntry& e = c.index[c.index_pos++];
        const uint64_t index = c.next_record++;
        if (!mine(index)) continue;
        w->record = index;
        w->offset = e.offset;
        w->lazy_length = e.length;
        stats_->stage(Stage::kRead).items.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      Finish(c);
      return false;
    }
    // Caught up with the start: read the rest of the file from the next record's frame.
    c.lazy = false;
    if (c.index_pos >= c.index.size()) {
      Finish(c);
      return false;
    }
    c.start_offset = c.index[c.index_pos].offset;
    std::vector<IndexEntry>().swap(c.index);
  }
  if (!c.reader) {
    TFRecordReaderOptions ro;
    ro.compression = options_.compression;
    ro.buffer_bytes = kReadBufferBytes;
    ro.start_offset = c.start_offset;
    if (io_pool_ != nullptr) {
      // The read-ahead's chunks account themselves; the reader's buffer is added below.
      ro.wrap_stream = [this](std::unique_ptr<SequentialFile> stream) {
        ReadAheadOptions ra;
        ra.memory = &stats_->pool(Pool::kReadBuffers);
        return NewReadAheadFile(std::move(stream), io_pool_, ra);
      };
    }
    Result<std::unique_ptr<TFRecordReader>> reader =
        TFRecordReader::Open(options_.files[c.file], ro);
    if (!reader.ok()) {
      c.clean = false;
      Finish(c);
      w->kind = WorkKind::kBadRecord;
      w->status = reader.status();
      w->offset = 0;
      return true;
    }
    c.reader = std::move(*reader);
    stats_->pool(Pool::kReadBuffers).Add(kReadBufferBytes);
  }
  for (;;) {
    std::string_view record;
    bool eof = false;
    Status s = c.reader->ReadRecord(&record, &eof);
    if (s.ok() && eof) {
      Finish(c);
      return false;
    }
    uint64_t index = c.next_record++;
    const bool is_mine = mine(index);
    if (!s.ok()) {
      c.clean = false;
      const uint64_t offset = c.reader->record_offset();
      if (!c.reader->can_continue()) Finish(c);
      if (!is_mine) {
        if (c.done) return false;
        continue;
      }
      w->kind = WorkKind::kBadRecord;
      w->status = s;
      w->record = index;
      w->offset = offset;
      return true;
    }
    if (!is_mine) continue;
    w->record = index;
    w->offset = c.reader->record_offset();
    w->owned.assign(record.data(), record.size());
    w->bytes = w->owned;
    stats_->stage(Stage::kRead).items.fetch_add(1, std::memory_order_relaxed);
    stats_->stage(Stage::kRead).bytes.fetch_add(record.size(), std::memory_order_relaxed);
    if (c.caching) {
      if (record_cache_->Reserve(static_cast<int64_t>(record.size()))) {
        c.pending_bytes += static_cast<int64_t>(record.size());
        c.pending.push_back({index, w->offset, w->owned});
      } else {
        record_cache_->Unreserve(c.pending_bytes);
        c.pending.clear();
        c.pending.shrink_to_fit();
        c.pending_bytes = 0;
        c.caching = false;
      }
    }
    return true;
  }
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
    Cursor& c = *cycle_[pos_];
    if (Read(c, w)) {
      ++produced_;
      if (++taken_ >= options_.block_length) {
        taken_ = 0;
        pos_ = (pos_ + 1) % cycle_.size();
      }
      return;
    }
    // This file is done: the next file takes its place in the cycle, as in tf.data.
    taken_ = 0;
    if (next_file_ < order_.size()) {
      cycle_[pos_] = Open(order_[next_file_++]);  // the old cursor was Finish()ed
    } else {
      cycle_.erase(cycle_.begin() + static_cast<ptrdiff_t>(pos_));
    }
  }
}

bool RecordSource::LoadIndex(Cursor& c) {
  const std::string& path = options_.files[c.file];
  if (options_.compression && *options_.compression != Compression::kNone) return false;
  Result<std::vector<IndexEntry>> index = ReadRecordIndex(IndexPathFor(path));
  if (!index.ok()) return false;
  Result<uint64_t> size = GetFileSize(path);
  if (!size.ok()) return false;
  // An index of another version of the file would put frames in the wrong places.
  const uint64_t indexed = index->empty() ? 0 : index->back().offset + index->back().length;
  if (indexed != *size) return false;
  if (!options_.compression && *size > 0) {
    Result<std::string> head =
        ReadFileRange(path, 0, std::min<uint64_t>(*size, kTFRecordHeaderBytes));
    if (!head.ok() || DetectCompression(*head) != Compression::kNone) return false;
  }
  c.index = std::move(*index);
  return true;
}

void RecordSource::Materialize(WorkItem* w) {
  const std::string& path = options_.files[w->file];
  const uint64_t length = w->lazy_length;
  w->lazy_length = 0;
  StageTimer timer(stats_->stage(Stage::kRead));
  Result<std::string> frame = ReadFileRange(path, w->offset, length);
  Status s = frame.status();
  std::string_view record;
  std::unique_ptr<TFRecordReader> reader;
  if (s.ok()) {
    // The frame alone, parsed (both CRCs checked) as the reader would at its offset in the file.
    TFRecordReaderOptions ro;
    ro.compression = Compression::kNone;
    ro.start_offset = w->offset;
    ro.buffer_bytes = length;
    reader = std::make_unique<TFRecordReader>(NewMemoryFile(path, std::move(*frame)), ro);
    bool eof = false;
    s = reader->ReadRecord(&record, &eof);
    if (s.ok() && eof) {
      s = DataLoss("truncated record at " + path + ":" + std::to_string(w->offset) +
                   " (the record index promises a frame there)");
    }
  }
  if (!s.ok()) {
    w->kind = WorkKind::kBadRecord;
    w->status = s;
    return;
  }
  w->owned.assign(record.data(), record.size());
  w->bytes = w->owned;
  stats_->stage(Stage::kRead).bytes.fetch_add(record.size(), std::memory_order_relaxed);
}

}  // namespace sluice

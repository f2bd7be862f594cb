#include "pipeline/caches.h"

namespace sluice {

RecordCache::RecordCache(size_t files, int64_t budget_bytes, PipelineStats* stats)
    : files_(files), budget_(budget_bytes), stats_(stats) {
  stats_->pool(Pool::kRecordCache).limit = budget_bytes;
}

RecordCache::~RecordCache() { stats_->pool(Pool::kRecordCache).Remove(reserved_, 0); }

const std::vector<RecordCache::Record>* RecordCache::Find(uint32_t file) const {
  return files_[file].get();
}

bool RecordCache::Reserve(int64_t bytes) {
  if (full_ || reserved_ + bytes > budget_) {
    full_ = true;
    stats_->cache_full = true;
    return false;
  }
  reserved_ += bytes;
  stats_->pool(Pool::kRecordCache).Add(bytes, 0);
  return true;
}

void RecordCache::Unreserve(int64_t bytes) {
  reserved_ -= bytes;
  stats_->pool(Pool::kRecordCache).Remove(bytes, 0);
}

void RecordCache::Commit(uint32_t file, std::vector<Record> records, int64_t /*bytes*/) {
  stats_->pool(Pool::kRecordCache).items.fetch_add(static_cast<int64_t>(records.size()));
  stats_->cache_entries.fetch_add(static_cast<int64_t>(records.size()));
  files_[file] = std::make_unique<std::vector<Record>>(std::move(records));
}

DecodedCache::DecodedCache(size_t files, int shard_index, int shard_count, int64_t budget_bytes,
                           PipelineStats* stats)
    : files_(files),
      shard_index_(shard_index),
      shard_count_(shard_count),
      budget_(budget_bytes),
      stats_(stats) {
  // The per-file bookkeeping is the cache's own memory: charged first (an image folder's can
  // take a small budget whole), as the images are.
  const int64_t bookkeeping = static_cast<int64_t>(files * sizeof(File));
  used_ = bookkeeping;
  PoolCounters& pool = stats_->pool(Pool::kDecodedCache);
  pool.limit = budget_bytes;
  pool.Add(bookkeeping, 0);
}

DecodedCache::~DecodedCache() {
  PoolCounters& pool = stats_->pool(Pool::kDecodedCache);
  pool.Remove(pool.bytes.load(), pool.items.load());
}

const CachedImage* DecodedCache::Find(uint32_t file, uint64_t record) const {
  const File& f = files_[file];
  std::lock_guard<std::mutex> lock(Mutex(file));
  return record < f.entries.size() ? f.entries[record].get() : nullptr;
}

void DecodedCache::Insert(uint32_t file, uint64_t record, CachedImage image) {
  // Bad entries cost a few bytes but are kept regardless, so a complete file stays complete.
  int64_t cost = image.bytes() + static_cast<int64_t>(sizeof(CachedImage) + image.error.size());
  int64_t used = used_.fetch_add(cost) + cost;
  if (used > budget_) {
    used_.fetch_sub(cost);
    stats_->cache_full = true;
    return;
  }
  File& f = files_[file];
  {
    std::lock_guard<std::mutex> lock(Mutex(file));
    if (record < f.entries.size() && f.entries[record]) {
      used_.fetch_sub(cost);
      return;
    }
    if (record >= f.entries.size()) {
      // The file's table of entries is charged as it grows (past the budget by that at most).
      const size_t capacity = f.entries.capacity();
      f.entries.resize(record + 1);
      const int64_t grown = static_cast<int64_t>((f.entries.capacity() - capacity) *
                                                 sizeof(std::unique_ptr<CachedImage>));
      used_.fetch_add(grown);
      cost += grown;
    }
    f.entries[record] = std::make_unique<CachedImage>(std::move(image));
    ++f.count;
  }
  stats_->pool(Pool::kDecodedCache).Add(cost);
  stats_->cache_entries.fetch_add(1);
}

void DecodedCache::SetRecordCount(uint32_t file, uint64_t records) {
  // Records r with r % count == index are this pipeline's.
  uint64_t n = records / shard_count_ +
               (records % shard_count_ > static_cast<uint64_t>(shard_index_) ? 1 : 0);
  files_[file].total = static_cast<int64_t>(records);
  files_[file].expected = static_cast<int64_t>(n);
}

bool DecodedCache::Complete(uint32_t file) const {
  const File& f = files_[file];
  int64_t expected = f.expected.load();
  if (expected < 0) return false;
  std::lock_guard<std::mutex> lock(Mutex(file));
  return static_cast<int64_t>(f.count) == expected;
}

}  // namespace sluice

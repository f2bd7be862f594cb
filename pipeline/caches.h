// The two caches. Both are bounded by bytes, account themselves in stats, and once full stop
// growing (and say so) rather than evict: an epoch-ordered scan defeats LRU anyway, and a stable
// cache keeps every later epoch's cost the same.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/sample_features.h"
#include "formats/status.h"
#include "pipeline/stats.h"

namespace sluice {

// RECORDS: raw records of whole files. Files are cached all or nothing, so a cached file needs no
// I/O at all. Used by the source thread only (no locking); the bytes stay put until destruction,
// so decode workers may hold views into them.
class RecordCache {
 public:
  RecordCache(size_t files, int64_t budget_bytes, PipelineStats* stats);
  ~RecordCache();

  struct Record {
    uint64_t index = 0;   // record number in the file
    uint64_t offset = 0;  // byte offset in the file
    std::string bytes;
    // Not OK: a record the reader refused deterministically (over the per-record limit), replayed
    // as the same bad record, bytes empty. length: its declared length (WorkItem::length).
    Status refused;
    uint64_t length = 0;
  };

  // The file's records (those this pipeline reads), or nullptr when it is not cached.
  const std::vector<Record>* Find(uint32_t file) const;
  // Whether `bytes` more may be held; false marks the cache full for good.
  bool Reserve(int64_t bytes);
  // Stores a file read completely and cleanly; its bytes were Reserve()d.
  void Commit(uint32_t file, std::vector<Record> records, int64_t bytes);
  // Gives back a reservation for a file that will not be committed.
  void Unreserve(int64_t bytes);

 private:
  std::vector<std::unique_ptr<std::vector<Record>>> files_;
  const int64_t budget_;
  int64_t reserved_ = 0;
  bool full_ = false;
  PipelineStats* stats_;
};

// DECODED: images decoded and resized to the cache size (shorter side), or the reason a record
// yields none. Filled by decode workers, read by workers and the source thread. Thread-safe.
struct CachedImage {
  int width = 0;
  int height = 0;
  std::unique_ptr<uint8_t[]> pixels;  // RGB, tightly packed; null when bad
  int32_t label = 0;
  std::string error;                  // non-empty: the record yields no image
  StatusCode code = StatusCode::kOk;  // error's
  // The reader refused the record (over the per-record limit): replayed as the same bad record
  // from the source, with error and code, instead of being decoded.
  bool refused = false;
  uint64_t offset = 0;
  uint64_t length = 0;  // the record's (WorkItem::length)
  // With a feature schema: the record's features as extracted (boxes untransformed), so later
  // epochs need not parse the record.
  SampleFeatures features;
  int64_t bytes() const { return static_cast<int64_t>(width) * height * 3 + features.bytes(); }
};

class DecodedCache {
 public:
  // budget_bytes bounds the images and the cache's own bookkeeping together: a few dozen bytes a
  // file, charged up front (and accounted in Pool::kDecodedCache), plus each file's table of
  // entries as it grows.
  DecodedCache(size_t files, int shard_index, int shard_count, int64_t budget_bytes,
               PipelineStats* stats);
  ~DecodedCache();

  const CachedImage* Find(uint32_t file, uint64_t record) const;
  // Stores the entry unless the budget is spent (which marks the cache full). Thread-safe; a
  // second insert for the same record is ignored.
  void Insert(uint32_t file, uint64_t record, CachedImage image);
  // The source read the whole file cleanly and found `records` records in it.
  void SetRecordCount(uint32_t file, uint64_t records);
  // Every record of the file this pipeline reads has an entry: the source can skip reading it.
  bool Complete(uint32_t file) const;
  // Records in the whole file, as last set by SetRecordCount (-1 when not known).
  int64_t RecordCount(uint32_t file) const { return files_[file].total.load(); }

 private:
  // One per file of the data set, allocated up front: an image folder has one per image (1.28M
  // for ImageNet), so a File is held by value and shares a striped mutex (48 bytes a file, not a
  // heap block with a mutex of its own at ~104).
  struct File {
    std::vector<std::unique_ptr<CachedImage>> entries;  // by record number; guarded by Mutex()
    uint64_t count = 0;                                 // guarded by Mutex()
    std::atomic<int64_t> expected{-1};  // entries a complete file has; -1: not known yet
    std::atomic<int64_t> total{-1};     // records in the file
  };
  static constexpr size_t kLockStripes = 64;
  std::mutex& Mutex(uint32_t file) const { return stripes_[file % kLockStripes]; }

  mutable std::array<std::mutex, kLockStripes> stripes_;
  std::vector<File> files_;  // never resized: File is not movable
  const int shard_index_;
  const int shard_count_;
  const int64_t budget_;
  std::atomic<int64_t> used_{0};
  PipelineStats* stats_;
};

}  // namespace sluice

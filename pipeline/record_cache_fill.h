// Filling the RECORDS cache with one file as a source reads it: each record of this pipeline's
// shard (or its refusal) is kept as it is read, and the file is committed when it was read to its
// end without damage, or dropped (reservation given back) when it was not or the cache filled.
// Whole files or none, as RecordCache holds them. Source thread only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/caches.h"
#include "pipeline/work_item.h"

namespace sluice {

class RecordCacheFill {
 public:
  // cache null: filling nothing.
  RecordCacheFill(RecordCache* cache, uint32_t file) : cache_(cache), file_(file) {}
  // Gives back the reservation of a file neither committed nor dropped.
  ~RecordCacheFill() { Stop(); }

  // Moved: the filling goes on in the new one (a source handing the rest of its file to another).
  RecordCacheFill(RecordCacheFill&& other) noexcept
      : cache_(std::exchange(other.cache_, nullptr)),
        file_(other.file_),
        pending_(std::move(other.pending_)),
        pending_bytes_(std::exchange(other.pending_bytes_, 0)) {}
  RecordCacheFill(const RecordCacheFill&) = delete;
  RecordCacheFill& operator=(const RecordCacheFill&) = delete;
  RecordCacheFill& operator=(RecordCacheFill&&) = delete;

  bool filling() const { return cache_ != nullptr; }
  void Keep(uint64_t record, uint64_t offset, const std::string& bytes);
  // A refused record (w: the bad record with its status), replayed as the same refusal.
  void KeepRefused(const WorkItem& w);
  // The file ends: committed when clean, else dropped.
  void Finish(bool clean);
  // Drops what was kept; fills nothing more.
  void Stop();

 private:
  void Add(RecordCache::Record record, int64_t bytes);

  RecordCache* cache_;
  const uint32_t file_;
  std::vector<RecordCache::Record> pending_;
  int64_t pending_bytes_ = 0;
};

}  // namespace sluice

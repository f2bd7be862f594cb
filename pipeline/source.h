// The Source seam (DESIGN.md "Seams"): the records of one file of the interleave cycle, served by
// one implementation per kind — FileReaderSource (a file of any kind, read through),
// RecordIndexSource (TFRecord frames or tar samples found through the file's `.idx`: a resumed
// stream's lazy start, and ranks sharing a file), RecordCacheSource and DecodedCacheSource. A new
// input format plugs in here; the epoch's file order, interleave, sharding, exactly-once and resume
// are written once above it (RecordSource).
#pragma once

#include <cstdint>

#include "pipeline/caches.h"
#include "pipeline/io_pool.h"
#include "pipeline/options.h"
#include "pipeline/shard_plan.h"
#include "pipeline/stats.h"
#include "pipeline/work_item.h"

namespace sluice {

// What every source of one pipeline iterator shares. The pointees outlive the sources; caches and
// io_pool may be null (no cache, no read-ahead).
struct SourceContext {
  const ResolvedOptions* options = nullptr;
  PipelineStats* stats = nullptr;
  IoPool* io_pool = nullptr;
  RecordCache* record_cache = nullptr;
  DecodedCache* decoded_cache = nullptr;
  RecordShard shard;

  // A file was read to its end without damage and held `records` records: the decoded cache can
  // now tell when it holds all of them.
  void FileReadCleanly(uint32_t file, uint64_t records) const {
    if (decoded_cache != nullptr && records > 0) decoded_cache->SetRecordCount(file, records);
  }
  void CountRead() const {
    stats->stage(Stage::kRead).items.fetch_add(1, std::memory_order_relaxed);
  }
};

// Not thread-safe: used by the source thread only.
class Source {
 public:
  virtual ~Source() = default;
  // Fills w with the file's next record of this pipeline's shard: kind kRecord with its bytes (or a
  // decoded-cache hit, or a lazy frame: WorkItem::lazy_length), or kBadRecord with a status naming
  // file and offset. Returns false at the end of the file; after that it is not called again.
  // REQUIRES: w as RecordSource resets it: kind kRecord, its file set, no bytes and no status.
  virtual bool Read(WorkItem* w) = 0;
};

}  // namespace sluice

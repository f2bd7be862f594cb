// The front of the pipeline, run serially on the source thread: this epoch's file order (seeded
// shuffle, static sharding), interleaving of cycle_length open files with block_length records
// from each in turn, and the record caches. Produces records in a deterministic order. With an
// IoPool, every open file is read ahead (and inflated) on the pool, so the cycle's files are read
// in parallel; the records, and the errors, come out the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/tfrecord_reader.h"
#include "pipeline/caches.h"
#include "pipeline/io_pool.h"
#include "pipeline/options.h"
#include "pipeline/stats.h"
#include "pipeline/work_item.h"

namespace sluice {

class RecordSource {
 public:
  // caches and io_pool may be null (no read-ahead); io_pool must outlive this. Not thread-safe:
  // one source thread.
  RecordSource(const ResolvedOptions& options, PipelineStats* stats, RecordCache* record_cache,
               DecodedCache* decoded_cache, IoPool* io_pool = nullptr);
  ~RecordSource();

  // Begins epoch `epoch` (0-based): computes its file order. Any unfinished epoch is abandoned.
  void StartEpoch(int64_t epoch);

  // Fills w with the epoch's next record: kind kRecord with bytes (or a decoded-cache hit), or
  // kBadRecord with the status naming file and offset when a record or file could not be read.
  // Sets *end_of_epoch instead when the epoch has no more records.
  void Next(WorkItem* w, bool* end_of_epoch);

  // For the epoch just started: its first n records (in this source's order) may come back
  // unread, as lazy items (WorkItem::lazy_length), wherever a file's record index lets the
  // source find its frames without reading them (uncompressed files with a `.idx` that matches
  // the file, and no record cache). A resumed stream passes over them; Materialize reads those
  // the shuffle buffer still holds when the stream starts.
  void SetLazyRecords(uint64_t n) { lazy_until_ = n; }
  // Reads a lazy item's record: afterwards w is what Next would have made of it (kRecord with
  // bytes, or kBadRecord naming file and offset).
  void Materialize(WorkItem* w);

  // This pipeline's files, in the order of the whole list (indexes used by WorkItem::file).
  const std::vector<std::string>& files() const { return options_.files; }
  // Files this pipeline reads in every epoch (after file-level sharding).
  const std::vector<uint32_t>& my_files() const { return my_files_; }
  // Record-level sharding is used when there are fewer files than shards.
  bool record_sharding() const { return record_shard_count_ > 1; }

 private:
  struct Cursor;
  std::unique_ptr<Cursor> Open(uint32_t file);
  // Returns false at the end of the cursor's file.
  bool Read(Cursor& c, WorkItem* w);
  // Loads the file's record index into c when it can stand in for reading (see SetLazyRecords).
  bool LoadIndex(Cursor& c);
  void Finish(Cursor& c);
  void DropCycle();

  const ResolvedOptions& options_;
  PipelineStats* stats_;
  RecordCache* record_cache_;
  DecodedCache* decoded_cache_;
  IoPool* io_pool_;
  std::vector<uint32_t> my_files_;
  int record_shard_index_ = 0;
  int record_shard_count_ = 1;

  std::vector<uint32_t> order_;  // this epoch's files
  size_t next_file_ = 0;         // into order_
  std::vector<std::unique_ptr<Cursor>> cycle_;
  size_t pos_ = 0;               // cursor whose turn it is
  int taken_ = 0;                // records taken from it in this block
  uint64_t produced_ = 0;        // records Next has returned in this epoch
  uint64_t lazy_until_ = 0;      // see SetLazyRecords
};

}  // namespace sluice

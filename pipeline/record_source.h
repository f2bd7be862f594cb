// The front of the pipeline, run serially on the source thread: this epoch's file order (seeded
// shuffle, static sharding), interleaving of cycle_length open files with block_length records
// from each in turn, and the lazy start of a resumed stream. Each open file is a Source
// (pipeline/source.h) of the kind its caches allow. Produces records in a deterministic order.
// With an IoPool, every open file is read ahead (and inflated) on the pool, so the cycle's files
// are read in parallel; the records, and the errors, come out the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/record_index_source.h"
#include "pipeline/source.h"

namespace sluice {

class RecordSource {
 public:
  // caches and io_pool may be null (no read-ahead); all must outlive this. Not thread-safe: one
  // source thread.
  RecordSource(const ResolvedOptions& options, PipelineStats* stats, RecordCache* record_cache,
               DecodedCache* decoded_cache, IoPool* io_pool = nullptr);
  ~RecordSource();

  RecordSource(const RecordSource&) = delete;
  RecordSource& operator=(const RecordSource&) = delete;

  // Begins epoch `epoch` (0-based): computes its file order. Any unfinished epoch is abandoned.
  void StartEpoch(int64_t epoch);

  // Fills w with the epoch's next record: kind kRecord with bytes (or a decoded-cache hit), or
  // kBadRecord with the status naming file and offset when a record or file could not be read.
  // Sets *end_of_epoch instead when the epoch has no more records.
  void Next(WorkItem* w, bool* end_of_epoch);

  // For the epoch just started: its first n records (in this source's order) may come back
  // unread, as lazy items (WorkItem::lazy_length), wherever a file's record index lets the
  // source find its frames without reading them (uncompressed TFRecord and tar files, through a
  // `.idx` that matches the file or an index built from its headers on open; not with a record
  // cache, which keeps every record read). A resumed stream passes over them; Materialize reads
  // those the shuffle buffer still holds when the stream starts.
  void SetLazyRecords(uint64_t n) { lazy_.until = n; }
  // Reads a lazy item's record: afterwards w is what Next would have made of it (kRecord with
  // bytes, or kBadRecord naming file and offset).
  void Materialize(WorkItem* w);

 private:
  // One file of the cycle. Its source is chosen when the file joins the cycle if a cache holds
  // it; a file read from disk is opened on its first turn instead, so its errors surface in
  // stream order and the lazy start sees the records produced by then.
  struct Slot {
    uint32_t file = 0;
    std::unique_ptr<Source> source;  // null until the first turn of a file read from disk
  };
  Slot Open(uint32_t file) const;
  std::unique_ptr<Source> OpenFromDisk(uint32_t file) const;
  // Returns false at the end of the slot's file.
  bool Read(Slot& slot, WorkItem* w);

  const ResolvedOptions& options_;
  const ShardPlan plan_;
  const SourceContext ctx_;

  // Before cycle_: the record-index sources in the cycle point at it.
  LazyWindow lazy_;  // produced: records Next has returned in this epoch
  std::vector<uint32_t> order_;  // this epoch's files
  size_t next_file_ = 0;         // into order_
  std::vector<Slot> cycle_;
  size_t pos_ = 0;   // slot whose turn it is
  int taken_ = 0;    // records taken from it in this block
};

}  // namespace sluice

// The unit that flows through the graph: one record (or an epoch-end marker) from the source,
// through decode, to the batcher. Items are pooled and reused, keeping their byte capacity, so
// the steady state allocates nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "formats/status.h"
#include "pipeline/batch.h"

namespace sluice {

struct CachedImage;

enum class WorkKind {
  kRecord,     // decode it into its slot
  kBadRecord,  // the source could not read it; status says why
  kEpochEnd,   // flush the partial batch of `epoch`
};

struct WorkItem {
  WorkKind kind = WorkKind::kRecord;
  uint64_t sequence = 0;  // global order across epochs: what the sequencer orders by
  int64_t epoch = 0;
  uint64_t epoch_index = 0;  // position in the epoch's order (before skips)
  // Position among the items this run emitted in the epoch: epoch_index less the records a
  // resumed run passed over. Decides the item's input buffer and slot.
  uint64_t run_index = 0;
  uint32_t file = 0;    // index into the pipeline's file list
  uint64_t record = 0;  // record number within the file
  uint64_t offset = 0;  // byte offset of the record, for error messages
  std::string owned;    // record bytes when they came from a file
  // Nonzero: a record passed over unread (RecordSource::SetLazyRecords), this long a frame at
  // `offset`; RecordSource::Materialize reads it if it is used after all.
  uint64_t lazy_length = 0;
  // The record's data length as its frame declares it, the same whichever path brought it (read,
  // lazy, either cache) and also for a bad record whose frame header was intact: what the shuffle
  // buffer's byte share measures (a length over max_held_record_bytes is charged 0: such a record
  // is refused and holds nothing), so a resumed run shuffles as the run it resumes did. 0 when
  // the frame's length could not be read.
  uint64_t length = 0;
  std::string_view bytes;               // the record: `owned` or a view into the record cache
  const CachedImage* cached = nullptr;  // decoded-cache hit: crop from this, no JPEG decode
  BatchBuffer* buffer = nullptr;        // where the image goes
  int slot = 0;
  Status status;  // after decode: why this record yields no image
  int32_t label = 0;
  // The shuffle buffer's byte share had made it emit early in this epoch by the time this item
  // left it: the epoch's order up to here depends on the share (Position.shuffle_bytes).
  bool shuffle_capped = false;
  // A kBadRecord that ends the stream whatever the error policy (the run cannot go on exactly).
  bool fatal = false;

  // Bytes this item holds while in flight (accounted in records_in_flight / shuffle_buffer).
  int64_t held_bytes() const { return static_cast<int64_t>(owned.size()); }
};

}  // namespace sluice

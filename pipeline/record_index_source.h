// A resumed stream's lazy start: while the stream is still passing over records it will not use,
// the file's index (`.idx`: a TFRecord's record index, a tar shard's sample index) stands in for
// reading it, and records come out as lazy items (WorkItem::lazy_length) that cost no payload I/O
// (checking them reads a TFRecord's frame headers, a tar's member headers). Once the stream has
// caught up, the rest of the file is read from the next record on, as FileReaderSource would.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/record_index.h"
#include "formats/tar_index.h"
#include "pipeline/file_reader_source.h"
#include "pipeline/source.h"

namespace sluice {

// The records of the epoch a resumed stream passes over (RecordSource::SetLazyRecords): records
// may come back lazy while produced < until.
struct LazyWindow {
  uint64_t produced = 0;  // records the epoch has produced so far
  uint64_t until = 0;
  bool open() const { return produced < until; }
};

class RecordIndexSource final : public Source {
 public:
  // For TFRecord files and tar shards. Null when the index cannot stand in for the file:
  // compressed, no index, an index in the other kind's format, or an index of another version of
  // the file (a TFRecord index that does not end where the file does, a tar index whose last
  // sample ends past it). window is read on every Read and outlives this. An entry that does not
  // match the file (IndexedFrameChecker, TarIndexChecker) is logged with the index path and line,
  // counted (PipelineStats::index_fallbacks), and the file is read from that entry's offset on.
  // After a tar index's last entry the rest of the shard is read (samples it does not list).
  static std::unique_ptr<RecordIndexSource> Open(const SourceContext& ctx, uint32_t file,
                                                 const LazyWindow* window);

  bool Read(WorkItem* w) override;

 private:
  RecordIndexSource(const SourceContext& ctx, uint32_t file, const LazyWindow* window,
                    std::vector<IndexEntry> index)
      : ctx_(ctx), file_(file), window_(window), index_(std::move(index)) {}
  // Checks entry i against the file, with the kind's checker.
  Status Check(size_t i);
  void Finish();
  // Reads the file from entry index_pos_ (or the end of the last entry) on, record next_record_,
  // as FileReaderSource would.
  bool ReadRest(WorkItem* w);

  const SourceContext& ctx_;
  const uint32_t file_;
  const LazyWindow* window_;
  // Where each record starts and how many bytes it spans: a TFRecord frame, or a tar sample from
  // just after the sample before it to the end of its last member's data.
  std::vector<IndexEntry> index_;
  // Every entry is checked against the file before it is trusted: a lying index falls back to
  // reading the file from the first entry that does not match, so no record is lost or doubled.
  // One of the two, by the file's kind: a TFRecord's frame headers, or a tar's samples (their
  // members, from the tar headers, against samples_).
  std::optional<IndexedFrameChecker> frame_checker_;
  std::optional<TarIndexChecker> tar_checker_;
  std::vector<TarIndexSample> samples_;
  size_t index_pos_ = 0;
  uint64_t next_record_ = 0;
  bool done_ = false;
  std::unique_ptr<FileReaderSource> rest_;  // the file after the window closed
};

// Reads a lazy item's record from `path`: afterwards w is what reading the file would have made
// of it (kRecord with bytes, or kBadRecord naming file and offset, also for a record over
// max_held_record_bytes, refused from its length field).
void MaterializeLazyRecord(const std::string& path, uint64_t max_held_record_bytes,
                           PipelineStats* stats, WorkItem* w);

// The same for a lazy tar sample, read from its first header (w->offset) with the reader options
// the file's reader has (keys, limits); the sample must end where its index entry ends.
void MaterializeLazySample(const std::string& path, const RecordReaderOptions& options,
                           PipelineStats* stats, WorkItem* w);

}  // namespace sluice

// A file's index (its `.idx`: a TFRecord's record index, a tar shard's sample index; or, without
// one that fits the file, the same built from the file's headers when it is opened) standing in
// for reading the file, in two cases:
//  - a resumed stream's lazy start: while the stream is still passing over records it will not
//    use, records come out as lazy items (WorkItem::lazy_length) that cost no payload I/O
//    (checking them reads a TFRecord's frame headers, a tar's member headers);
//  - a file shared by ranks (RecordShard count > 1): the other ranks' records are checked the
//    same way and passed over, and this rank's are read through a read-ahead of only their byte
//    ranges (OpenRangesFile), so no rank reads the others' payloads.
// Otherwise (one rank, after the lazy start) the rest of the file is read from the next record on,
// as FileReaderSource would.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/record_index.h"
#include "formats/tar_index.h"
#include "pipeline/file_reader_source.h"
#include "pipeline/record_cache_fill.h"
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
  // For uncompressed TFRecord files and tar shards: null for any other. The file's `.idx` is
  // used when it is of this version of the file (a TFRecord index that ends where the file does,
  // a tar index whose last sample ends within it) and in the file's kind's format; otherwise one
  // is built now from the file's headers (FrameHeaderWalker, ScanTarSamples), up to any damage
  // the reader cannot step past (null when the damage leaves it no entry) and, for a lazy start
  // alone (one rank, the window open), no further than the records the window has left. window
  // is read on every Read and outlives this.
  // An entry of a `.idx`, or of a tar index built here, that does not match the file
  // (IndexedFrameChecker, TarIndexChecker) is logged with the index's name and line, counted
  // (PipelineStats::index_fallbacks), and the file is read from that entry's offset on; a
  // TFRecord index built here is the headers just read, and not checked again. After the last
  // entry of an index that does not end where the file does (any tar index, a built one cut
  // short), the rest of the file is read as its reader reads it.
  // A record of this rank read through the index is what FileReaderSource would make of it (the
  // same checks, errors and refusals, both naming file:offset); an error the file's reader could
  // not step past ends the file, as it would there.
  // fill_cache: keep this rank's records in ctx.record_cache as they are read, the whole file or
  // none, as FileReaderSource does; such a source gives no lazy records, whatever the window (a
  // lazy item holds no bytes to keep).
  static std::unique_ptr<RecordIndexSource> Open(const SourceContext& ctx, uint32_t file,
                                                 const LazyWindow* window, bool fill_cache = false);

  // Gives back ranges_'s accounting when the file is not read to its end.
  ~RecordIndexSource() override { Release(); }

  RecordIndexSource(const RecordIndexSource&) = delete;
  RecordIndexSource& operator=(const RecordIndexSource&) = delete;

  bool Read(WorkItem* w) override;

 private:
  RecordIndexSource(const SourceContext& ctx, uint32_t file, const LazyWindow* window,
                    std::vector<IndexEntry> index, bool tiles, RecordCache* fill)
      : ctx_(ctx),
        file_(file),
        window_(window),
        index_(std::move(index)),
        tiles_(tiles),
        fill_(fill, file) {}
  // Checks entry i against the file, with the kind's checker.
  Status Check(size_t i);
  // Reads this rank's record at entry index_pos_ - 1 (record w->record) from ranges_, opened at
  // the first such entry.
  bool ReadOwn(WorkItem* w, const IndexEntry& e);
  // Ends the file: done_, and what it holds let go; clean: it read cleanly to its end.
  void Finish(bool clean);
  // Counts what the index holds in Pool::kReadBuffers (index_bytes_), for as long as it is held.
  void AccountIndex();
  // Lets go of the index, the checkers and ranges_ (and their accounting).
  void Release();
  // Reads the file from entry index_pos_ (or the end of the last entry) on, record next_record_,
  // as FileReaderSource would.
  bool ReadRest(WorkItem* w);

  const SourceContext& ctx_;
  const uint32_t file_;
  const LazyWindow* window_;
  // Where each record starts and how many bytes it spans: a TFRecord frame, or a tar sample from
  // just after the sample before it to the end of its last member's data.
  std::vector<IndexEntry> index_;
  // The entries end where the file does (a TFRecord index of the whole file): nothing to read
  // after the last.
  const bool tiles_;
  // Every entry is checked against the file before it is trusted: a lying index falls back to
  // reading the file from the first entry that does not match, so no record is lost or doubled.
  // One of the two, by the file's kind: a TFRecord's frame headers, or a tar's samples (their
  // members, from the tar headers, against samples_). Neither for a TFRecord index built from
  // the headers on open.
  std::optional<IndexedFrameChecker> frame_checker_;
  std::optional<TarIndexChecker> tar_checker_;
  std::vector<TarIndexSample> samples_;
  size_t index_pos_ = 0;
  uint64_t next_record_ = 0;
  bool done_ = false;
  bool clean_ = true;        // no record of this rank was damaged
  int64_t index_bytes_ = 0;  // index_ and samples_, as accounted
  // Only this rank's records' bytes, read ahead (when there is an IoPool), from the first one read
  // after the lazy start; its reader's buffer is accounted while it is open.
  std::unique_ptr<SequentialFile> ranges_;
  RecordReaderOptions ranges_options_;  // the file's reader's, for the records read from ranges_
  RecordCacheFill fill_;                // handed on to rest_ with the records kept so far
  std::unique_ptr<FileReaderSource> rest_;  // the file after the window closed
};

// What reading one record through its index entry came to.
struct IndexedRead {
  Status status;
  uint64_t offset = 0;  // the record's first byte (a tar sample's first header), as read
  uint64_t length = 0;  // its data length as the file declares it (the reader's record_length)
  bool final = false;   // nothing after it can be trusted (the reader could not step past)
};

// Reads the record (a TFRecord frame, or a tar sample with whatever precedes its first header)
// that an index entry places at [offset, offset + length) of path into *record, from `stream`
// (the file's bytes from offset on), as the file's reader would: the same checks, errors naming
// path:offset, and a record over options' max_held_record_bytes refused without holding it. A
// record that does not end where the entry does (the file changed since the entry was checked)
// is DataLoss, final.
IndexedRead ReadIndexedRecord(SourceKind kind, const std::string& path,
                              std::unique_ptr<SequentialFile> stream, RecordReaderOptions options,
                              uint64_t offset, uint64_t length, std::string* record);
// The next n bytes of `base` as a stream of their own (read by ReadIndexedRecord); base outlives
// it.
std::unique_ptr<SequentialFile> NewRangeOfStream(SequentialFile* base, uint64_t n);

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

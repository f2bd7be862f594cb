// A data set's file, of any kind (formats/record_reader_factory.h), read from disk (read ahead on
// the IoPool when there is one), optionally filling the record cache with the whole file as it
// goes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/record_reader_factory.h"
#include "pipeline/record_cache_fill.h"
#include "pipeline/source.h"

namespace sluice {

// Where reading starts: byte offset of a frame and the record number it holds; clean: the records
// before it (read some other way) were not damaged.
struct FileStart {
  uint64_t offset = 0;
  uint64_t record = 0;
  bool clean = true;
};

// The reader options a data set's file is read with (its keys, its image file's label, the
// per-record limit); the stream's buffer, start and read-ahead are the caller's.
RecordReaderOptions RecordReaderOptionsFor(const ResolvedOptions& options, uint32_t file);

// A record refused for its size (w: the bad record with its status): a tombstone in the decoded
// cache, if there is one, so it replays the refusal without reading the record again.
void KeepRefusedDecoded(const SourceContext& ctx, uint32_t file, const WorkItem& w);

class FileReaderSource final : public Source {
 public:
  // fill_cache: keep the file's records in ctx.record_cache if they fit (the whole file or none).
  // The file opens on the first Read, so its errors surface in stream order.
  FileReaderSource(const SourceContext& ctx, uint32_t file, bool fill_cache, FileStart start = {});
  // Goes on filling the record cache with `fill` (the records before start already kept in it).
  FileReaderSource(const SourceContext& ctx, uint32_t file, RecordCacheFill fill, FileStart start);
  // Gives back the read buffer and any cache reservation of a file not read to its end.
  ~FileReaderSource() override;

  FileReaderSource(const FileReaderSource&) = delete;
  FileReaderSource& operator=(const FileReaderSource&) = delete;

  bool Read(WorkItem* w) override;

 private:
  // Opens the reader; false (with w a kBadRecord) when the file cannot be opened.
  bool OpenReader(WorkItem* w);
  void Finish();

  const SourceContext& ctx_;
  const uint32_t file_;
  const uint64_t start_offset_;
  std::unique_ptr<RecordReader> reader_;
  uint64_t next_record_;  // record number of the next record in the file
  bool done_ = false;
  bool clean_ = true;     // read to the end without damage
  RecordCacheFill fill_;  // of the record cache, when filling it
};

}  // namespace sluice

// Reads TFRecord files: per record, little-endian
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
// with large buffered reads and both CRCs verified. Records come back as views into the reader's
// buffer (or into the bytes a LendingSequentialFile lends), so reading copies nothing beyond the
// file read itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "formats/compression.h"
#include "formats/file.h"
#include "formats/record_reader.h"
#include "formats/status.h"
#include "formats/stream_buffer.h"

namespace sluice {

inline constexpr size_t kTFRecordHeaderBytes = 12;  // length + its CRC
inline constexpr size_t kTFRecordFooterBytes = 4;   // data CRC

// The data length a frame header (kTFRecordHeaderBytes at `header`) declares, if its CRC matches:
// a header whose CRC does not is corrupt.
std::optional<uint64_t> FrameLength(const char* header);

// A stream that can lend its bytes instead of copying them out (pipeline/read_ahead_file.h's
// read-ahead is one). TFRecordReader parses records in place from such a stream, copying only the
// records that straddle two loans.
class LendingSequentialFile : public SequentialFile {
 public:
  // Sets *data to the stream's next bytes, at least one, or to empty at the end of the file. They
  // stay valid until the next call of Lend or Read, or the file's destruction, and count as read.
  // Errors as Read's: after every byte before them.
  virtual Status Lend(std::string_view* data) = 0;
};

struct TFRecordReaderOptions {
  // nullopt: detect from the file's first bytes.
  std::optional<Compression> compression;
  // Bytes asked of the file per read; grows when one record is larger.
  size_t buffer_bytes = 4 << 20;
  // A length above this is refused as corrupt before anything is allocated for it.
  uint64_t max_record_bytes = uint64_t{1} << 31;
  // A record longer than this (and not over max_record_bytes) is intact but too large to hold:
  // ReadRecord reads through it in buffer-sized pieces, holding none of it, and refuses it (see
  // ReadRecord). The memory budget sets it (pipeline/options.h max_held_record_bytes).
  uint64_t max_held_record_bytes = UINT64_MAX;
  // Open() passes the opened stream (after inflation, for a compressed file) through this before
  // reading it, e.g. to read it ahead on other threads (pipeline/read_ahead_file.h). The wrapper
  // must deliver the same bytes and errors in the same order.
  std::function<std::unique_ptr<SequentialFile>(std::unique_ptr<SequentialFile>)> wrap_stream;
  // Where the stream starts in its file: Open() seeks there (uncompressed files only; it must be
  // the start of a record's frame, e.g. from the record index), and offsets in results and
  // errors stay those of the file.
  uint64_t start_offset = 0;
};

// Not thread-safe: one reader per thread.
class TFRecordReader final : public RecordReader {
 public:
  // Opens path (detecting compression unless given). Errors name the path.
  static Result<std::unique_ptr<TFRecordReader>> Open(const std::string& path,
                                                      const TFRecordReaderOptions& options = {});
  // Reads from an already opened (and already decompressed) stream.
  TFRecordReader(std::unique_ptr<SequentialFile> file, const TFRecordReaderOptions& options = {});

  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // On OK: *end_of_file == false and *record views the next record's data (valid until the next
  // call), or *end_of_file == true at a clean end of the file (an empty file has zero records).
  // Errors, all naming "<file>:<offset>" of the record's first byte (for a compressed file, an
  // offset in the uncompressed stream, written "<file>:<offset> (uncompressed)"):
  //  - DataLoss "corrupted record at F:O (data checksum mismatch)": the length was intact, so the
  //    reader has stepped past that record and the next call reads the one after it.
  //  - DataLoss "corrupted record at F:O (length checksum mismatch | length N over the limit)" and
  //    DataLoss "truncated record at F:O (...)": nothing after can be trusted; every later call
  //    returns the same status (see can_continue()).
  //  - ResourceExhausted "record at F:O of N bytes is over the limit of M bytes": longer than
  //    max_held_record_bytes; its payload was read through, not held, and the next call reads the
  //    record after it (its data checksum is not checked).
  //  - I/O errors from the file, also final.
  Status ReadRecord(std::string_view* record, bool* end_of_file);
  // ReadRecord, with the record copied into *record (its capacity reused). A record larger than
  // the read buffer goes from the file straight into *record instead of being assembled in the
  // buffer first, so it is held once, and the buffer keeps its size.
  Status ReadRecordInto(std::string* record, bool* end_of_file) override;
  // ReadRecord for a record the caller does not want (another shard's): the same checks and
  // errors, but a record larger than the read buffer is streamed through it, not assembled.
  Status SkipRecord(bool* end_of_file) override;

  // Offset (in the uncompressed stream) of the record last returned or reported as corrupt.
  uint64_t record_offset() const override { return record_offset_; }
  // Data length the frame of the record last returned or reported declares: known for a record
  // refused as too large (over max_held_record_bytes) or with a bad data checksum too; 0 when its
  // length field was not read intact or is over max_record_bytes (corrupt).
  uint64_t record_length() const override { return record_length_; }
  // Bytes of the stream consumed so far: the offset where the next record starts.
  uint64_t offset() const { return offset_; }
  // False once the reader hit an error it cannot step past.
  bool can_continue() const override { return final_status_.ok(); }
  const std::string& name() const { return file_->name(); }

 private:
  // Makes the next n bytes of the stream contiguous: in place in the lent bytes when they hold
  // them all, else in buf_. Sets *at to them; returns how many are there (< n only at EOF).
  Result<size_t> Peek(size_t n, const char** at);
  // Consumes n bytes that Peek made available.
  void Skip(size_t n);
  // Consumes the next n bytes without making them contiguous: copies them to `to` unless it is
  // null, and folds them into *crc unless it is null. Returns how many there were (< n only at
  // the end of the file). Holds no more than the buffer does, however large n is.
  Result<size_t> Stream(size_t n, char* to, uint32_t* crc);
  // ReadRecord and ReadRecordInto: the record is a view, and also copied to *copy when not null.
  // skip: the record is wanted by nobody (SkipRecord); *record is left alone.
  Status Next(std::string_view* record, std::string* copy, bool* end_of_file, bool skip = false);
  // Makes at least n bytes available at buf_.data(), copying lent bytes in when the file lends;
  // returns the number available (< n at EOF).
  Result<size_t> Fill(size_t n);

  std::unique_ptr<SequentialFile> file_;
  LendingSequentialFile* lender_ = nullptr;  // file_, when it lends
  std::string_view lent_;                    // lent bytes not consumed yet
  TFRecordReaderOptions options_;
  StreamBuffer buf_;  // its end is the file's: when lending, set by Lend's empty loan
  uint64_t offset_ = 0;
  uint64_t record_offset_ = 0;
  uint64_t record_length_ = 0;
  Status final_status_;
};

}  // namespace sluice

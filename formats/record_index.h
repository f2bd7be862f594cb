// Record index files: one line per record, "<offset> <length>\n" in decimal, where offset is where
// the record's frame starts and length is the whole frame (12 + data + 4 bytes). This is the format
// NVIDIA DALI's tfrecord2idx writes, so indexes made by either tool serve both. For compressed
// shards the offsets are positions in the uncompressed stream. The index of "<shard>" lives at
// "<shard>.idx".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/file.h"
#include "formats/status.h"

namespace sluice {

struct IndexEntry {
  uint64_t offset = 0;  // first byte of the record's frame
  uint64_t length = 0;  // frame bytes: 12 + data length + 4
  bool operator==(const IndexEntry&) const = default;
};

std::string IndexPathFor(const std::string& shard_path);

std::string FormatRecordIndex(const std::vector<IndexEntry>& entries);
// Parses and checks the entries tile the stream: the first starts at 0, each starts where the last
// ended, each length is at least 16. Errors name the path and line.
Result<std::vector<IndexEntry>> ParseRecordIndex(std::string_view text, const std::string& path);

// Whether the entries end where a file of file_size bytes does (they tile it when they parsed).
bool IndexEndsWithFile(const std::vector<IndexEntry>& entries, uint64_t file_size);

Status WriteRecordIndex(const std::string& path, const std::vector<IndexEntry>& entries);
Result<std::vector<IndexEntry>> ReadRecordIndex(const std::string& path);

// The 12-byte frame headers of a file opened for positional reads, each read with the bytes after
// it, so that the headers of frames smaller than a read come from one read of many of them. Not
// thread-safe; fd outlives it.
class FrameHeaderWindow {
 public:
  // A read of this many bytes covers the headers of the frames smaller than it that follow.
  static constexpr size_t kBytes = 64 << 10;

  FrameHeaderWindow(int fd, std::string path, uint64_t file_size)
      : fd_(fd), path_(std::move(path)), file_size_(file_size) {}
  // The header at offset: from the bytes held, or else read with the bytes after it, `read` in
  // all (at least the header's, at most to the end of the file). A failed read leaves nothing
  // held.
  Result<const char*> Header(uint64_t offset, size_t read);
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }

 private:
  int fd_;
  std::string path_;
  uint64_t file_size_;
  std::string bytes_;  // the file's bytes from offset_ on, as last read
  uint64_t offset_ = 0;
};

// Checks, one entry at a time as a reader trusts them, that an uncompressed shard's frames are
// where its index says: the frame header at the entry's offset (the data length and its masked
// CRC32C) must be intact and describe a frame of exactly the entry's length. An index can tile
// the file and still lie (two entries merged into one, one split in two); this catches that at the
// first entry it touches. Reading the 12-byte headers is the cost, paid for every entry checked
// (a resumed stream checks every record it passes over before its first batch): frames smaller
// than FrameHeaderWindow::kBytes are checked from one read of that many bytes; for larger
// ones each header is its own small read, and Check(index, i) asks the kernel ahead of time for
// the next kAdviseAhead of them (posix_fadvise WILLNEED) so the device reads them in parallel
// rather than one synchronous read after another. With headers_only every header is its own small
// read, whatever the frame's size: for a reader that uses few of the frames it checks (a rank
// passing over the other ranks' records), where windows would read the whole file. A frame longer
// than a reader takes (TFRecordReaderOptions::max_record_bytes) fails the check, as it fails the
// reader. Not thread-safe.
class IndexedFrameChecker {
 public:
  static constexpr size_t kAdviseAhead = 64;

  // index_name: what errors call the index (its path, when empty).
  static Result<IndexedFrameChecker> Open(const std::string& shard_path, bool headers_only = false,
                                          std::string index_name = "");
  // Checks index[i], the index's line i + 1, after hinting the headers of the entries after it.
  // DataLoss naming the index, the line and what the frame holds instead.
  // REQUIRES: i < index.size(); the same index on every call.
  Status Check(const std::vector<IndexEntry>& index, size_t i);
  // The same for one entry, without looking ahead.
  Status Check(const IndexEntry& entry, size_t line);

 private:
  IndexedFrameChecker(std::string path, std::string index_name, UniqueFd fd, uint64_t file_size,
                      size_t window_bytes)
      : index_name_(std::move(index_name)),
        fd_(std::move(fd)),
        window_(fd_.get(), std::move(path), file_size),
        window_bytes_(window_bytes) {}
  std::string index_name_;
  UniqueFd fd_;
  FrameHeaderWindow window_;  // reads fd_
  size_t window_bytes_;       // FrameHeaderWindow::kBytes, or a header's bytes alone
  size_t advised_until_ = 0;  // entries before it have had their headers hinted
};

// Walks an uncompressed TFRecord file's frames from their headers alone, each its own 12-byte read,
// payloads seeked over whatever their size, by TFRecordReader's rules: a header cut short or
// unreadable, a length that fails its CRC or is over max_record_bytes, or a payload running past
// the end of the file is damage the reader cannot step past, and ends the walk. What `sluice
// index` would write: how a file without its `.idx` gets one on open
// (pipeline/record_index_source.cc), whose users read few of the frames it finds again, and how
// a file's records are counted. Not thread-safe; fd outlives it.
class FrameHeaderWalker {
 public:
  FrameHeaderWalker(int fd, std::string path, uint64_t file_size)
      : window_(fd, std::move(path), file_size) {}
  // The next frame. False at the end of the file, status() OK, or at damage, status() naming
  // path:offset and what is wrong there.
  bool Next(IndexEntry* frame);
  const Status& status() const { return status_; }

 private:
  FrameHeaderWindow window_;
  uint64_t offset_ = 0;
  Status status_;
};

// Scans a shard (any compression) and returns its index. Any corrupt record is an error naming its
// offset: an index must only describe a shard that reads cleanly.
Result<std::vector<IndexEntry>> BuildRecordIndex(const std::string& shard_path);

}  // namespace sluice

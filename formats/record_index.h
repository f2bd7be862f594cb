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

Status WriteRecordIndex(const std::string& path, const std::vector<IndexEntry>& entries);
Result<std::vector<IndexEntry>> ReadRecordIndex(const std::string& path);

// Checks, one entry at a time as a reader trusts them, that an uncompressed shard's frames are
// where its index says: the frame header at the entry's offset (the data length and its masked
// CRC32C) must be intact and describe a frame of exactly the entry's length. An index can tile
// the file and still lie (two entries merged into one, one split in two); this catches that at the
// first entry it touches. Reading the 12-byte headers is the cost, paid for every entry checked
// (a resumed stream checks every record it passes over before its first batch): frames smaller
// than kWindowBytes are checked from one read of kWindowBytes covering many of them; for larger
// ones each header is its own small read, and Check(index, i) asks the kernel ahead of time for
// the next kAdviseAhead of them (posix_fadvise WILLNEED) so the device reads them in parallel
// rather than one synchronous read after another. With headers_only every header is its own small
// read, whatever the frame's size: for a reader that uses few of the frames it checks (a rank
// passing over the other ranks' records), where windows would read the whole file. A frame longer
// than a reader takes (TFRecordReaderOptions::max_record_bytes) fails the check, as it fails the
// reader. Not thread-safe.
class IndexedFrameChecker {
 public:
  static constexpr size_t kWindowBytes = 64 << 10;
  static constexpr size_t kAdviseAhead = 64;

  static Result<IndexedFrameChecker> Open(const std::string& shard_path, bool headers_only = false);
  // Checks index[i], the index's line i + 1, after hinting the headers of the entries after it.
  // DataLoss naming the index path, the line and what the frame holds instead.
  // REQUIRES: i < index.size(); the same index on every call.
  Status Check(const std::vector<IndexEntry>& index, size_t i);
  // The same for one entry, without looking ahead.
  Status Check(const IndexEntry& entry, size_t line);

 private:
  IndexedFrameChecker(std::string path, UniqueFd fd, uint64_t file_size, size_t window_bytes)
      : path_(std::move(path)),
        fd_(std::move(fd)),
        file_size_(file_size),
        window_bytes_(window_bytes) {}
  std::string path_;
  UniqueFd fd_;
  uint64_t file_size_;
  size_t window_bytes_;  // kWindowBytes, or a header's bytes alone
  std::string window_;   // the file's bytes from window_offset_ on, as last read
  uint64_t window_offset_ = 0;
  size_t advised_until_ = 0;  // entries before it have had their headers hinted
};

// Scans a shard (any compression) and returns its index. Any corrupt record is an error naming its
// offset: an index must only describe a shard that reads cleanly.
Result<std::vector<IndexEntry>> BuildRecordIndex(const std::string& shard_path);

}  // namespace sluice

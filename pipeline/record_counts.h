// The number of records in each file of a data set, as the pipeline's source counts them in
// BatchPosition::end_record terms: every frame, intact or corrupt, and one more for the damage
// that ends a file early. Equal shares need the counts of every peer shard (the consumers of one
// part), so those files are counted, not only this shard's. Counts are cached process-wide per
// (path, size, mtime, compression), so a job's start and DescribeStream do not scan a file twice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/compression.h"
#include "formats/source_kind.h"
#include "formats/status.h"

namespace sluice {

struct FileRecords {
  uint64_t records = 0;
  // The file cannot be opened or read at all: the source yields one bad record for it in every
  // shard that reads it, whatever the record sharding.
  bool unreadable = false;
  bool operator==(const FileRecords&) const = default;
};

// Counts one file (no cache). Uses the file's `.idx` when the pipeline's lazy start would trust
// it (uncompressed, the index tiles exactly the file's bytes); else scans the frames: for an
// uncompressed file only the 12-byte headers are read and payloads are seeked over; a GZIP or
// ZLIB file is inflated through a bounded buffer. compression: nullopt = detect as the reader
// does. Never fails: a file that cannot be opened is `unreadable`. An index that tiles the file
// but lies about its frames (entries merged or split) gives its own count, where the reader would
// find the truth (IndexedFrameChecker): that changes how many batches equal shares make, never
// that every shard makes the same number.
// A tar shard is read through as the source reads it (payloads skipped); an image file is one
// record without being opened (one that cannot be read is a bad record in its place).
FileRecords CountFileRecords(const std::string& path, std::optional<Compression> compression,
                             SourceKind kind = SourceKind::kTFRecord);

// Counts every file through the process-wide cache (at most kMaxCachedCounts entries; the oldest
// go first). Thread-safe; files are counted outside the cache's lock, each once: a caller that
// asks for a file another caller is counting waits for that count.
std::vector<FileRecords> CountRecords(const std::vector<std::string>& files,
                                      const std::vector<SourceKind>& kinds,
                                      std::optional<Compression> compression);

inline constexpr size_t kMaxCachedCounts = 1 << 16;

// Files counted (not found in the cache) by CountRecords since the process started: lets tests
// and stats tell a cache hit from a rescan.
uint64_t RecordCountScans();

}  // namespace sluice

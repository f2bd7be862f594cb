// Record index files: one line per record, "<offset> <length>\n" in decimal, where offset is where
// the record's frame starts and length is the whole frame (12 + data + 4 bytes). This is the format
// NVIDIA DALI's tfrecord2idx writes, so indexes made by either tool serve both. For compressed
// shards the offsets are positions in the uncompressed stream. The index of "<shard>" lives at
// "<shard>.idx".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// Scans a shard (any compression) and returns its index. Any corrupt record is an error naming its
// offset: an index must only describe a shard that reads cleanly.
Result<std::vector<IndexEntry>> BuildRecordIndex(const std::string& shard_path);

}  // namespace sluice

// Writes TFRecord files (plain, GZIP or ZLIB) and, by default, their record index. Output appears
// only on Close(): until then it lives under a temporary name, and an unclosed writer removes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/compression.h"
#include "formats/file.h"
#include "formats/record_index.h"
#include "formats/status.h"

namespace sluice {

struct TFRecordWriterOptions {
  Compression compression = Compression::kNone;
  int compression_level = -1;  // zlib's level, -1 = its default
  bool write_index = true;     // also write IndexPathFor(path)
};

class TFRecordWriter {
 public:
  static Result<std::unique_ptr<TFRecordWriter>> Create(const std::string& path,
                                                        const TFRecordWriterOptions& options = {});
  // Writes into `file` (no index). For tests and for callers owning the file.
  explicit TFRecordWriter(std::unique_ptr<WritableFile> file);

  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  Status Write(std::string_view record);
  // Commits the shard and then its index. After Close only the destructor may be called.
  Status Close();

  uint64_t records() const { return index_.size(); }
  // Uncompressed bytes written so far.
  uint64_t bytes() const { return offset_; }
  const std::vector<IndexEntry>& index() const { return index_; }

 private:
  std::unique_ptr<WritableFile> file_;
  std::string path_;  // empty when no index is to be written
  std::vector<IndexEntry> index_;
  uint64_t offset_ = 0;
};

// Encodes one frame (header, data, footer) into out; exposed for tests that craft shards by hand.
void AppendTFRecordFrame(std::string_view record, std::string* out);

}  // namespace sluice

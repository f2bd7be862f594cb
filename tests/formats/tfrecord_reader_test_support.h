// Helpers shared by the TFRecord reader tests: shards framed in memory, a reader over one, and
// reading until end of file or the first error.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/file.h"
#include "formats/tfrecord_reader.h"
#include "formats/tfrecord_writer.h"

namespace sluice::tfrecord_testing {

inline constexpr size_t kOverhead = kTFRecordHeaderBytes + kTFRecordFooterBytes;

inline std::string Shard(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) AppendTFRecordFrame(r, &out);
  return out;
}

inline std::unique_ptr<TFRecordReader> MemoryReader(std::string contents,
                                                    size_t buffer_bytes = 4 << 20,
                                                    int64_t fail_at = -1) {
  TFRecordReaderOptions options;
  options.buffer_bytes = buffer_bytes;
  return std::make_unique<TFRecordReader>(NewMemoryFile("mem", std::move(contents), fail_at),
                                          options);
}

// Reads until end of file or the first error; returns the records and that error (OK at EOF).
struct ReadAll {
  std::vector<std::string> records;
  Status status;
};
inline ReadAll ReadUntilError(TFRecordReader* reader) {
  ReadAll out;
  while (true) {
    std::string_view record;
    bool eof = false;
    out.status = reader->ReadRecord(&record, &eof);
    if (!out.status.ok() || eof) return out;
    out.records.emplace_back(record);
  }
}

}  // namespace sluice::tfrecord_testing

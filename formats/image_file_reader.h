// One image file (JPEG, PNG or WebP, detected by content when decoded) read as a RecordReader: one
// record, the file's bytes handed on as a tf.train.Example (formats/example_builder.h) with the
// image under the dataset's image key, the file's label (when it has one) under its label key, and
// the path under image/filename.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "formats/record_reader.h"
#include "formats/record_reader_factory.h"
#include "formats/status.h"

namespace sluice {

// Not thread-safe: one reader per thread.
class ImageFileReader final : public RecordReader {
 public:
  // Stats path (the file is opened when its record is read). Errors name the path; a start_offset
  // other than 0 is InvalidArgument (an image file's one record starts there).
  static Result<std::unique_ptr<ImageFileReader>> Open(const std::string& path,
                                                       const RecordReaderOptions& options);

  // The file's one record; *end_of_file on the call after it. ResourceExhausted, without reading
  // the file, when it is over options.stream.max_held_record_bytes; a file that cannot be read (or
  // shrank since Open) is final, naming the path.
  Status ReadRecordInto(std::string* record, bool* end_of_file) override;
  // Steps past the record without reading the file.
  Status SkipRecord(bool* end_of_file) override;
  uint64_t record_offset() const override { return 0; }
  // The file's size as Open found it.
  uint64_t record_length() const override { return size_; }
  bool can_continue() const override { return final_status_.ok(); }

 private:
  ImageFileReader(std::string path, uint64_t size, const RecordReaderOptions& options);

  const std::string path_;
  const uint64_t size_;
  const uint64_t max_held_bytes_;
  const std::string image_key_;
  const std::string label_key_;
  const std::optional<int64_t> label_;
  bool done_ = false;  // the record was returned, refused or skipped
  Status final_status_;
};

}  // namespace sluice

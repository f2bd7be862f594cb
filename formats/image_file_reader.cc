#include "formats/image_file_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "formats/example_builder.h"
#include "formats/file.h"
#include "formats/image_example.h"

namespace sluice {

Result<std::unique_ptr<ImageFileReader>> ImageFileReader::Open(const std::string& path,
                                                               const RecordReaderOptions& options) {
  if (options.stream.start_offset != 0) {
    return InvalidArgument(path + ": an image file has one record, at offset 0; cannot start at " +
                           std::to_string(options.stream.start_offset));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  return std::unique_ptr<ImageFileReader>(
      new ImageFileReader(path, static_cast<uint64_t>(st.st_size), options));
}

ImageFileReader::ImageFileReader(std::string path, uint64_t size,
                                 const RecordReaderOptions& options)
    : path_(std::move(path)),
      size_(size),
      max_held_bytes_(options.stream.max_held_record_bytes),
      image_key_(options.image_key),
      label_key_(options.label_key),
      label_(options.label) {}

Status ImageFileReader::ReadRecordInto(std::string* record, bool* end_of_file) {
  *end_of_file = false;
  if (!final_status_.ok()) return final_status_;
  if (done_) {
    *end_of_file = true;
    return Status::OK();
  }
  done_ = true;
  if (size_ > max_held_bytes_) {
    return ResourceExhausted(path_ + ":0: image file of " + std::to_string(size_) +
                             " bytes is over the per-record limit of " +
                             std::to_string(max_held_bytes_) + " bytes");
  }
  Result<UniqueFd> fd = OpenForPositionalReads(path_);
  if (!fd.ok()) {
    final_status_ = fd.status();
    return final_status_;
  }
  // The image is read straight into the record, which has room reserved for the whole Example:
  // its bytes are held once, moved once as the Example is laid out around them.
  ExampleBuilder builder;
  const auto size = static_cast<size_t>(size_);
  builder.AddBytesInPlace(image_key_, size);
  if (label_) builder.AddInt64(label_key_, *label_);
  builder.AddBytes(kImageFilenameKey, path_);
  record->clear();
  record->reserve(builder.Size());
  record->resize(size);
  Status read = ReadFully(fd->get(), path_, 0, size, record->data());
  if (!read.ok()) {
    record->clear();
    final_status_ = read;
    return final_status_;
  }
  builder.FinishInPlace(record);
  return Status::OK();
}

Status ImageFileReader::SkipRecord(bool* end_of_file) {
  *end_of_file = false;
  if (!final_status_.ok()) return final_status_;
  *end_of_file = done_;
  done_ = true;
  return Status::OK();
}

}  // namespace sluice

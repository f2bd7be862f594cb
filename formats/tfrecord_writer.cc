#include "formats/tfrecord_writer.h"

#include <unistd.h>

#include <cerrno>
#include <utility>

#include "formats/crc32c.h"
#include "formats/tfrecord_reader.h"

namespace sluice {
namespace {

void EncodeFixed64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

void EncodeFixed32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

void EncodeHeader(std::string_view record, char (&header)[kTFRecordHeaderBytes]) {
  EncodeFixed64(header, record.size());
  EncodeFixed32(header + 8, crc32c::Mask(crc32c::Value(header, 8)));
}

void EncodeFooter(std::string_view record, char (&footer)[kTFRecordFooterBytes]) {
  EncodeFixed32(footer, crc32c::Mask(crc32c::Value(record)));
}

}  // namespace

Result<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Create(
    const std::string& path, const TFRecordWriterOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, NewAtomicFile(path));
  if (options.compression != Compression::kNone) {
    file = NewDeflatingFile(std::move(file), options.compression, options.compression_level);
  }
  auto writer = std::make_unique<TFRecordWriter>(std::move(file));
  if (options.write_index) writer->path_ = path;
  return writer;
}

TFRecordWriter::TFRecordWriter(std::unique_ptr<WritableFile> file) : file_(std::move(file)) {}

Status TFRecordWriter::Write(std::string_view record) {
  if (file_ == nullptr) return FailedPrecondition("write to a closed TFRecord writer");
  char header[kTFRecordHeaderBytes];
  char footer[kTFRecordFooterBytes];
  EncodeHeader(record, header);
  EncodeFooter(record, footer);
  RETURN_IF_ERROR(file_->Append(std::string_view(header, sizeof(header))));
  RETURN_IF_ERROR(file_->Append(record));
  RETURN_IF_ERROR(file_->Append(std::string_view(footer, sizeof(footer))));
  uint64_t frame = kTFRecordHeaderBytes + record.size() + kTFRecordFooterBytes;
  index_.push_back(IndexEntry{offset_, frame});
  offset_ += frame;
  return Status::OK();
}

Status TFRecordWriter::Close() {
  if (file_ == nullptr) return FailedPrecondition("TFRecord writer already closed");
  if (!path_.empty()) {
    // An index left from an earlier shard at this path would describe the wrong file if writing
    // the new one failed after the shard was committed; better none than a wrong one.
    std::string index_path = IndexPathFor(path_);
    if (::unlink(index_path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "remove stale index", index_path);
    }
  }
  Status committed = file_->Commit();
  file_.reset();
  RETURN_IF_ERROR(committed);
  if (path_.empty()) return Status::OK();
  return WriteRecordIndex(IndexPathFor(path_), index_);
}

void AppendTFRecordFrame(std::string_view record, std::string* out) {
  char header[kTFRecordHeaderBytes];
  char footer[kTFRecordFooterBytes];
  EncodeHeader(record, header);
  EncodeFooter(record, footer);
  out->append(header, sizeof(header));
  out->append(record);
  out->append(footer, sizeof(footer));
}

}  // namespace sluice

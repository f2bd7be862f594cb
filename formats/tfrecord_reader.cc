#include "formats/tfrecord_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "formats/crc32c.h"

namespace sluice {
namespace {

// The smallest buffer that holds a header; tests use tiny buffers to exercise every refill path.
constexpr size_t kMinBufferBytes = kTFRecordHeaderBytes + kTFRecordFooterBytes;

inline uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

inline uint32_t DecodeFixed32(const char* p) {
  return uint32_t{static_cast<uint8_t>(p[0])} | (uint32_t{static_cast<uint8_t>(p[1])} << 8) |
         (uint32_t{static_cast<uint8_t>(p[2])} << 16) |
         (uint32_t{static_cast<uint8_t>(p[3])} << 24);
}

}  // namespace

std::optional<uint64_t> FrameLength(const char* header) {
  if (crc32c::Unmask(DecodeFixed32(header + 8)) != crc32c::Value(header, 8)) return std::nullopt;
  return DecodeFixed64(header);
}

Result<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(const std::string& path,
                                                             const TFRecordReaderOptions& options) {
  TFRecordReaderOptions opts = options;
  if (!opts.compression) {
    // Bytes that match no known header are read as a plain file, so damage at its start is
    // reported as a corrupt record at offset 0 like damage anywhere else.
    ASSIGN_OR_RETURN(std::string head, ReadFileHead(path, kTFRecordHeaderBytes));
    opts.compression = DetectCompression(head);
  }
  if (opts.start_offset > 0 && *opts.compression != Compression::kNone) {
    return InvalidArgument(path + ": a compressed file can only be read from its start");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file,
                   OpenSequentialFile(path, opts.start_offset));
  if (*opts.compression != Compression::kNone) file = NewInflatingFile(std::move(file));
  if (opts.wrap_stream) file = opts.wrap_stream(std::move(file));
  return std::make_unique<TFRecordReader>(std::move(file), opts);
}

TFRecordReader::TFRecordReader(std::unique_ptr<SequentialFile> file,
                               const TFRecordReaderOptions& options)
    : file_(std::move(file)),
      options_(options),
      buf_(std::max(options.buffer_bytes, kMinBufferBytes)),
      offset_(options.start_offset) {
  lender_ = dynamic_cast<LendingSequentialFile*>(file_.get());
}

Result<size_t> TFRecordReader::Peek(size_t n, const char** at) {
  if (lender_ != nullptr && buf_.empty()) {
    if (lent_.empty() && !buf_.at_end()) {
      RETURN_IF_ERROR(lender_->Lend(&lent_));
      if (lent_.empty()) buf_.MarkEnd();
    }
    if (lent_.size() >= n) {
      *at = lent_.data();
      return lent_.size();
    }
  }
  ASSIGN_OR_RETURN(size_t avail, Fill(n));
  *at = buf_.data();
  return avail;
}

void TFRecordReader::Skip(size_t n) {
  // Peek serves from buf_ whenever it holds anything, and then it holds at least n.
  if (!buf_.empty()) {
    buf_.Consume(n);
  } else {
    lent_.remove_prefix(n);
  }
}

Result<size_t> TFRecordReader::Fill(size_t n) {
  // A frame larger than the buffer grows it as the bytes arrive, not to the length the header
  // announces: a damaged length that passes its CRC (or a crafted one) costs at most twice what
  // the file really holds. (ReadRecordInto's string is sized from the length, bounded by
  // max_held_record_bytes.)
  return buf_.Fill(n, [this](size_t need, size_t room, char* to, size_t* got) {
    if (lender_ == nullptr) return file_->Read(room, to, got);
    // Copy only what this frame needs: the records after it are parsed in place again.
    if (lent_.empty()) RETURN_IF_ERROR(lender_->Lend(&lent_));
    *got = std::min(need, lent_.size());
    std::memcpy(to, lent_.data(), *got);
    lent_.remove_prefix(*got);
    return Status::OK();
  });
}

Result<size_t> TFRecordReader::Stream(size_t n, char* to, uint32_t* crc) {
  size_t done = 0;
  while (done < n) {
    const char* from = nullptr;
    size_t got = 0;
    if (!buf_.empty()) {
      got = std::min(n - done, buf_.size());
      from = buf_.data();
      buf_.Consume(got);
    } else if (buf_.at_end()) {
      break;
    } else if (lender_ != nullptr) {
      if (lent_.empty()) {
        RETURN_IF_ERROR(lender_->Lend(&lent_));
        if (lent_.empty()) {
          buf_.MarkEnd();
          break;
        }
      }
      got = std::min(n - done, lent_.size());
      from = lent_.data();
      lent_.remove_prefix(got);
    } else if (to != nullptr) {
      RETURN_IF_ERROR(file_->Read(n - done, to + done, &got));
      from = to + done;
    } else {
      // Nowhere to put them: through the buffer, which is empty here.
      RETURN_IF_ERROR(Fill(1).status());
      continue;
    }
    if (got == 0) {
      buf_.MarkEnd();
      break;
    }
    if (crc != nullptr) *crc = crc32c::Extend(*crc, from, got);
    if (to != nullptr && from != to + done) std::memcpy(to + done, from, got);
    done += got;
  }
  return done;
}

Status TFRecordReader::ReadRecord(std::string_view* record, bool* end_of_file) {
  return Next(record, nullptr, end_of_file);
}

Status TFRecordReader::ReadRecordInto(std::string* record, bool* end_of_file) {
  std::string_view view;
  return Next(&view, record, end_of_file);
}

Status TFRecordReader::SkipRecord(bool* end_of_file) {
  return Next(nullptr, nullptr, end_of_file, /*skip=*/true);
}

Status TFRecordReader::Next(std::string_view* record, std::string* copy, bool* end_of_file,
                            bool skip) {
  *end_of_file = false;
  if (!final_status_.ok()) return final_status_;
  record_offset_ = offset_;
  record_length_ = 0;
  const size_t buffer_bytes = std::max(options_.buffer_bytes, kMinBufferBytes);
  // Grown for the last record, whose view is now void: not kept for the next ones.
  buf_.ShrinkTo(buffer_bytes);

  auto where = [&] {
    std::string w = name() + ":" + std::to_string(record_offset_);
    if (options_.compression.value_or(Compression::kNone) != Compression::kNone) {
      w += " (uncompressed)";
    }
    return w;
  };
  auto fail = [&](Status s) {
    final_status_ = std::move(s);
    return final_status_;
  };
  auto truncated = [&](uint64_t expected, size_t got) {
    return fail(DataLoss("truncated record at " + where() + " (expected " +
                         std::to_string(expected) + " bytes, file ends after " +
                         std::to_string(got) + ")"));
  };

  const char* header = nullptr;
  Result<size_t> avail = Peek(kTFRecordHeaderBytes, &header);
  if (!avail.ok()) return fail(avail.status());
  if (*avail == 0) {
    *end_of_file = true;
    return Status::OK();
  }
  if (*avail < kTFRecordHeaderBytes) return truncated(kTFRecordHeaderBytes, *avail);

  const std::optional<uint64_t> declared = FrameLength(header);
  if (!declared) {
    return fail(DataLoss("corrupted record at " + where() + " (length checksum mismatch)"));
  }
  const uint64_t length = *declared;
  if (length > options_.max_record_bytes ||
      length > SIZE_MAX - kTFRecordHeaderBytes - kTFRecordFooterBytes) {
    return fail(DataLoss("corrupted record at " + where() + " (length " + std::to_string(length) +
                         " over the limit of " + std::to_string(options_.max_record_bytes) +
                         " bytes)"));
  }
  // Only a length that passed the check: a crafted one near 2^64 must not reach the callers'
  // sums (ShuffleBuffer charges record lengths).
  record_length_ = length;

  const size_t frame = kTFRecordHeaderBytes + static_cast<size_t>(length) + kTFRecordFooterBytes;
  const bool refused = length > options_.max_held_record_bytes;
  if (refused || ((copy != nullptr || skip) && frame > buf_.capacity())) {
    // Streamed: the payload goes to *copy, or nowhere when refused or skipped, never through a
    // grown buffer. *copy is sized from the length up front: max_held_record_bytes bounds it.
    Skip(kTFRecordHeaderBytes);
    char* to = nullptr;
    if (!refused && !skip) {
      copy->resize(length);
      to = copy->data();
    }
    uint32_t crc = 0;
    Result<size_t> got = Stream(length, to, refused ? nullptr : &crc);
    if (!got.ok()) return fail(got.status());
    if (*got < length) return truncated(frame, kTFRecordHeaderBytes + *got);
    const char* footer = nullptr;
    avail = Peek(kTFRecordFooterBytes, &footer);
    if (!avail.ok()) return fail(avail.status());
    if (*avail < kTFRecordFooterBytes) {
      return truncated(frame, kTFRecordHeaderBytes + length + *avail);
    }
    const uint32_t stored = DecodeFixed32(footer);
    Skip(kTFRecordFooterBytes);
    offset_ += frame;
    if (refused) {
      return ResourceExhausted("record at " + where() + " of " + std::to_string(length) +
                               " bytes is over the limit of " +
                               std::to_string(options_.max_held_record_bytes) +
                               " bytes that the memory budget allows one record");
    }
    if (crc32c::Unmask(stored) != crc) {
      return DataLoss("corrupted record at " + where() + " (data checksum mismatch)");
    }
    if (!skip) *record = *copy;
    return Status::OK();
  }

  const char* start = nullptr;
  avail = Peek(frame, &start);
  if (!avail.ok()) return fail(avail.status());
  if (*avail < frame) return truncated(frame, *avail);

  const char* data = start + kTFRecordHeaderBytes;
  uint32_t stored = DecodeFixed32(data + length);
  Skip(frame);
  offset_ += frame;
  if (crc32c::Unmask(stored) != crc32c::Value(data, length)) {
    return DataLoss("corrupted record at " + where() + " (data checksum mismatch)");
  }
  if (skip) return Status::OK();
  if (copy != nullptr) {
    copy->assign(data, length);
    *record = *copy;
  } else {
    *record = std::string_view(data, length);
  }
  return Status::OK();
}

}  // namespace sluice

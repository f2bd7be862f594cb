#include "formats/record_index.h"

#include <fcntl.h>

#include <algorithm>
#include <charconv>

#include "formats/file.h"
#include "formats/tfrecord_reader.h"

namespace sluice {
namespace {

constexpr uint64_t kMinFrameBytes = kTFRecordHeaderBytes + kTFRecordFooterBytes;

// Parses a decimal uint64 at the start of s (after spaces and tabs) and removes it from s.
bool ConsumeNumber(std::string_view* s, uint64_t* out) {
  size_t start = s->find_first_not_of(" \t");
  if (start == std::string_view::npos) return false;
  s->remove_prefix(start);
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), *out);
  if (ec != std::errc() || end == s->data()) return false;
  s->remove_prefix(static_cast<size_t>(end - s->data()));
  return true;
}

}  // namespace

std::string IndexPathFor(const std::string& shard_path) { return shard_path + ".idx"; }

std::string FormatRecordIndex(const std::vector<IndexEntry>& entries) {
  std::string out;
  out.reserve(entries.size() * 16);
  auto append_number = [&out](uint64_t v) {
    char buf[20];  // the digits of UINT64_MAX
    out.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
  };
  for (const IndexEntry& e : entries) {
    append_number(e.offset);
    out += ' ';
    append_number(e.length);
    out += '\n';
  }
  return out;
}

Result<std::vector<IndexEntry>> ParseRecordIndex(std::string_view text, const std::string& path) {
  std::vector<IndexEntry> entries;
  uint64_t expected_offset = 0;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

    auto bad = [&](const std::string& why) {
      return DataLoss("bad record index " + path + ":" + std::to_string(line_number) + ": " + why);
    };
    IndexEntry e;
    std::string_view rest = line;
    if (!ConsumeNumber(&rest, &e.offset) || !ConsumeNumber(&rest, &e.length) ||
        rest.find_first_not_of(" \t") != std::string_view::npos) {
      return bad("expected \"<offset> <length>\", got \"" + std::string(line.substr(0, 80)) + "\"");
    }
    if (e.offset != expected_offset) {
      return bad(std::string(e.offset > expected_offset ? "gap" : "overlap") + ": record at " +
                 std::to_string(e.offset) + ", but the previous one ends at " +
                 std::to_string(expected_offset));
    }
    if (e.length < kMinFrameBytes) {
      return bad("length " + std::to_string(e.length) + " is below the smallest record (" +
                 std::to_string(kMinFrameBytes) + " bytes)");
    }
    if (e.length > UINT64_MAX - e.offset) return bad("record extends past 2^64");
    expected_offset = e.offset + e.length;
    entries.push_back(e);
  }
  return entries;
}

bool IndexEndsWithFile(const std::vector<IndexEntry>& entries, uint64_t file_size) {
  return (entries.empty() ? 0 : entries.back().offset + entries.back().length) == file_size;
}

Status WriteRecordIndex(const std::string& path, const std::vector<IndexEntry>& entries) {
  return WriteFileAtomically(path, FormatRecordIndex(entries));
}

Result<std::vector<IndexEntry>> ReadRecordIndex(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseRecordIndex(text, path);
}

Result<const char*> FrameHeaderWindow::Header(uint64_t offset, size_t read) {
  if (offset >= offset_ && offset - offset_ + kTFRecordHeaderBytes <= bytes_.size()) {
    return bytes_.data() + (offset - offset_);
  }
  // Never less than the header: one the file ends before fails its read.
  const uint64_t left = offset < file_size_ ? file_size_ - offset : 0;
  const size_t n =
      static_cast<size_t>(std::max<uint64_t>(std::min<uint64_t>(read, left), kTFRecordHeaderBytes));
  bytes_.resize(n);
  offset_ = offset;
  Status s = ReadFully(fd_, path_, offset, n, bytes_.data());
  if (!s.ok()) {
    bytes_.clear();
    return s;
  }
  return bytes_.data();
}

Result<IndexedFrameChecker> IndexedFrameChecker::Open(const std::string& shard_path,
                                                      bool headers_only, std::string index_name) {
  ASSIGN_OR_RETURN(uint64_t size, GetFileSize(shard_path));
  ASSIGN_OR_RETURN(UniqueFd fd, OpenForPositionalReads(shard_path));
  if (index_name.empty()) index_name = IndexPathFor(shard_path);
  return IndexedFrameChecker(shard_path, std::move(index_name), std::move(fd), size,
                             headers_only ? kTFRecordHeaderBytes : FrameHeaderWindow::kBytes);
}

Status IndexedFrameChecker::Check(const std::vector<IndexEntry>& index, size_t i) {
  if (i + kAdviseAhead / 2 >= advised_until_) {
    const size_t end = std::min(index.size(), i + kAdviseAhead);
    for (size_t j = std::max(advised_until_, i + 1); j < end; ++j) {
      // Small frames' headers come in windows read whole; hinting them would be one syscall each
      // for pages the next window reads anyway.
      if (index[j].length < window_bytes_) continue;
      ::posix_fadvise(fd_.get(), static_cast<off_t>(index[j].offset), kTFRecordHeaderBytes,
                      POSIX_FADV_WILLNEED);
    }
    advised_until_ = std::max(advised_until_, end);
  }
  return Check(index[i], i + 1);
}

Status IndexedFrameChecker::Check(const IndexEntry& entry, size_t line) {
  // Only on failure: a resumed stream checks every record it passes over.
  auto where = [&] {
    return index_name_ + ":" + std::to_string(line) + " (record at " +
           std::to_string(entry.offset) + ", " + std::to_string(entry.length) + " bytes)";
  };
  // A small frame: the read holds the headers of the frames after it too. A large one: the next
  // header is past any window, so only this one is read.
  const size_t read = entry.length < window_bytes_ ? window_bytes_ : kTFRecordHeaderBytes;
  Result<const char*> header = window_.Header(entry.offset, read);
  if (!header.ok()) return DataLoss("record index " + where() + ": " + header.status().message());
  const std::optional<uint64_t> length = FrameLength(*header);
  if (!length) return DataLoss("record index " + where() + ": no intact frame header there");
  if (*length != entry.length - kMinFrameBytes) {
    return DataLoss("record index " + where() + ": the frame there is " +
                    std::to_string(*length + kMinFrameBytes) + " bytes");
  }
  if (*length > TFRecordReaderOptions().max_record_bytes) {
    return DataLoss("record index " + where() + ": a record of " + std::to_string(*length) +
                    " bytes is over the reader's limit");
  }
  return Status::OK();
}

bool FrameHeaderWalker::Next(IndexEntry* frame) {
  const uint64_t file_size = window_.file_size();
  if (!status_.ok() || offset_ >= file_size) return false;
  auto damage = [&](const std::string& what) {
    status_ = DataLoss(window_.path() + ":" + std::to_string(offset_) + ": " + what);
    return false;
  };
  if (file_size - offset_ < kTFRecordHeaderBytes) {
    return damage("the file ends inside a record header");
  }
  Result<const char*> header = window_.Header(offset_, kTFRecordHeaderBytes);
  if (!header.ok()) {
    status_ = header.status();
    return false;
  }
  const std::optional<uint64_t> length = FrameLength(*header);
  if (!length) return damage("corrupted record length (its checksum does not match)");
  if (*length > TFRecordReaderOptions().max_record_bytes) {
    return damage("a record of " + std::to_string(*length) + " bytes is over the reader's limit");
  }
  const uint64_t bytes = *length + kMinFrameBytes;
  if (bytes > file_size - offset_) {
    return damage("a record of " + std::to_string(*length) +
                  " bytes runs past the end of the file");
  }
  *frame = IndexEntry{offset_, bytes};
  offset_ += bytes;
  return true;
}

Result<std::vector<IndexEntry>> BuildRecordIndex(const std::string& shard_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(shard_path));
  std::vector<IndexEntry> entries;
  while (true) {
    std::string_view record;
    bool end_of_file = false;
    RETURN_IF_ERROR(reader->ReadRecord(&record, &end_of_file));
    if (end_of_file) return entries;
    entries.push_back(
        IndexEntry{reader->record_offset(), reader->offset() - reader->record_offset()});
  }
}

}  // namespace sluice

#include "formats/record_index.h"

#include <charconv>
#include <cstring>

#include "formats/crc32c.h"
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

Status WriteRecordIndex(const std::string& path, const std::vector<IndexEntry>& entries) {
  return WriteFileAtomically(path, FormatRecordIndex(entries));
}

Result<std::vector<IndexEntry>> ReadRecordIndex(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseRecordIndex(text, path);
}

Result<IndexedFrameChecker> IndexedFrameChecker::Open(const std::string& shard_path) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenForPositionalReads(shard_path));
  return IndexedFrameChecker(shard_path, std::move(fd));
}

Status IndexedFrameChecker::Check(const IndexEntry& entry, size_t line) {
  const std::string where = IndexPathFor(path_) + ":" + std::to_string(line) + " (record at " +
                            std::to_string(entry.offset) + ", " + std::to_string(entry.length) +
                            " bytes)";
  char header[kTFRecordHeaderBytes];
  Status read = ReadFully(fd_.get(), path_, entry.offset, sizeof(header), header);
  if (!read.ok()) return DataLoss("record index " + where + ": " + read.message());
  uint64_t length;
  uint32_t masked_crc;
  std::memcpy(&length, header, sizeof(length));  // little-endian, as the frame stores it
  std::memcpy(&masked_crc, header + sizeof(length), sizeof(masked_crc));
  if (crc32c::Unmask(masked_crc) != crc32c::Value(header, sizeof(length))) {
    return DataLoss("record index " + where + ": no intact frame header there");
  }
  if (length != entry.length - kMinFrameBytes) {
    return DataLoss("record index " + where + ": the frame there is " +
                    std::to_string(length + kMinFrameBytes) + " bytes");
  }
  return Status::OK();
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

#include "formats/tar_index.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>

#include "formats/file.h"
#include "formats/record_index.h"

namespace sluice {
namespace {

// What the builder and the checkers read through: payloads are seeked over, so a small buffer.
constexpr size_t kCheckBufferBytes = 64 << 10;
// The inner samples CheckTarIndexEnds reads, each from a reader of its own, before counting the
// shard (one pass over its headers) is cheaper.
constexpr size_t kMaxGappedSampleReads = 16;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// The next whitespace-separated token of *s (empty at the end), removed from *s.
std::string_view NextToken(std::string_view* s) {
  size_t start = 0;
  while (start < s->size() && IsSpace((*s)[start])) ++start;
  size_t end = start;
  while (end < s->size() && !IsSpace((*s)[end])) ++end;
  const std::string_view token = s->substr(start, end - start);
  s->remove_prefix(end);
  return token;
}

bool ParseUint(std::string_view s, uint64_t* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

void AppendNumber(std::string* out, uint64_t v) {
  char buf[20];  // the digits of UINT64_MAX
  out->append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

std::string Describe(std::string_view name, uint64_t offset, uint64_t size) {
  return "\"" + std::string(name) + "\" at " + std::to_string(offset) + ", " +
         std::to_string(size) + " bytes";
}

// Whether the sample the reader just read is exactly `sample`; DataLoss naming `where` if not.
Status CompareSample(const TarSampleReader& reader, const TarIndexSample& sample,
                     const std::string& where) {
  if (!reader.members_kept()) {
    return DataLoss("tar index " + where +
                    ": the sample there has more member names than the per-record limit "
                    "holds, so it cannot be checked");
  }
  const std::vector<TarSampleMember>& got = reader.members();
  if (got.size() != sample.members.size()) {
    return DataLoss("tar index " + where + ": the sample there has " + std::to_string(got.size()) +
                    " members, its entry " + std::to_string(sample.members.size()));
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const TarSampleMember& m = got[k];
    const TarIndexMember& e = sample.members[k];
    if (m.name != e.name || m.extension() != e.ext || m.data_offset != e.offset ||
        m.size != e.size) {
      return DataLoss("tar index " + where + ": member " + std::to_string(k + 1) + " is " +
                      Describe(m.name, m.data_offset, m.size) + ", its entry says " +
                      Describe(e.name, e.offset, e.size));
    }
  }
  return Status::OK();
}

// options' keys and per-record limit (so a checked sample is refused as reading it would refuse
// it), reading a plain file from start_offset.
RecordReaderOptions CheckOptions(RecordReaderOptions options, uint64_t start_offset) {
  const uint64_t max_held = options.stream.max_held_record_bytes;
  options.stream = TFRecordReaderOptions{};
  options.stream.max_held_record_bytes = max_held;
  options.stream.compression = Compression::kNone;
  options.stream.buffer_bytes = kCheckBufferBytes;
  options.stream.start_offset = start_offset;
  options.keep_tar_members = true;
  return options;
}

}  // namespace

uint64_t TarIndexSample::padded_end() const {
  const TarIndexMember& last = members.back();
  return last.offset + (last.size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
}

std::string FormatTarIndex(const std::vector<TarIndexSample>& samples) {
  std::string out(kTarIndexVersion);
  out += ' ';
  AppendNumber(&out, samples.size());
  out += '\n';
  for (const TarIndexSample& sample : samples) {
    for (size_t k = 0; k < sample.members.size(); ++k) {
      const TarIndexMember& m = sample.members[k];
      if (k > 0) out += ' ';
      out += m.ext;
      out += ' ';
      AppendNumber(&out, m.offset);
      out += ' ';
      AppendNumber(&out, m.size);
      out += ' ';
      out += m.name;
    }
    out += '\n';
  }
  return out;
}

Result<std::vector<TarIndexSample>> ParseTarIndex(std::string_view text, const std::string& path,
                                                  uint64_t shard_bytes) {
  size_t line_number = 0;
  auto next_line = [&text, &line_number] {
    ++line_number;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    return line;
  };
  auto bad = [&](const std::string& why) {
    return DataLoss("bad tar index " + path + ":" + std::to_string(line_number) + ": " + why);
  };
  std::string_view first = next_line();
  const std::string_view first_shown = first.substr(0, 80);
  const std::string_view version = NextToken(&first);
  uint64_t count = 0;
  if (version != kTarIndexVersion || !ParseUint(NextToken(&first), &count) ||
      !NextToken(&first).empty()) {
    return bad("expected \"" + std::string(kTarIndexVersion) +
               " <samples>\" (DALI wds2idx's format), got \"" + std::string(first_shown) + "\"");
  }
  std::vector<TarIndexSample> samples;
  // One past the previous member's padded data: the next member's header starts there or later.
  uint64_t end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (text.empty()) {
      ++line_number;
      return bad("the index ends after " + std::to_string(i) + " of its " + std::to_string(count) +
                 " samples");
    }
    std::string_view line = next_line();
    TarIndexSample sample;
    for (;;) {
      const std::string_view ext = NextToken(&line);
      if (ext.empty()) break;
      TarIndexMember m;
      m.ext = std::string(ext);
      const std::string_view offset = NextToken(&line);
      const std::string_view size = NextToken(&line);
      const std::string_view name = NextToken(&line);
      if (!ParseUint(offset, &m.offset) || !ParseUint(size, &m.size) || name.empty()) {
        return bad("member " + std::to_string(sample.members.size() + 1) +
                   ": expected \"<ext> <offset> <size> <name>\"");
      }
      m.name = std::string(name);
      if (m.offset % kTarBlockBytes != 0) {
        return bad("member " + std::to_string(sample.members.size() + 1) + ": offset " +
                   std::to_string(m.offset) + " is not a multiple of 512");
      }
      if (m.offset < end || m.offset - end < kTarBlockBytes) {
        return bad("member " + std::to_string(sample.members.size() + 1) + " at " +
                   std::to_string(m.offset) + " overlaps the member before it, which ends at " +
                   std::to_string(end));
      }
      // Its padded data and the next header must fit in 64 bits: offset + size + 512 <= 2^64-1.
      constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
      if (m.offset > kMax - kTarBlockBytes || m.size > kMax - kTarBlockBytes - m.offset) {
        return bad("member " + std::to_string(sample.members.size() + 1) + " extends past 2^64");
      }
      end = m.offset + (m.size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
      if (end > shard_bytes) {
        return bad("member " + std::to_string(sample.members.size() + 1) + " ends at " +
                   std::to_string(end) + ", past the end of the " + std::to_string(shard_bytes) +
                   "-byte shard");
      }
      sample.members.push_back(std::move(m));
    }
    if (sample.members.empty()) return bad("a sample without members");
    samples.push_back(std::move(sample));
  }
  while (!text.empty()) {
    std::string_view line = next_line();
    if (!NextToken(&line).empty()) {
      return bad("more samples than the " + std::to_string(count) + " its first line says");
    }
  }
  return samples;
}

Status WriteTarIndex(const std::string& path, const std::vector<TarIndexSample>& samples) {
  return WriteFileAtomically(path, FormatTarIndex(samples));
}

uint64_t MaxTarIndexBytes(uint64_t shard_bytes) {
  constexpr uint64_t kVersionLineBytes = 64;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  return shard_bytes > (kMax - kVersionLineBytes) / 2 ? kMax : 2 * shard_bytes + kVersionLineBytes;
}

Result<std::vector<TarIndexSample>> ReadTarIndex(const std::string& path, uint64_t shard_bytes) {
  const uint64_t max_bytes = MaxTarIndexBytes(shard_bytes);
  auto too_large = [&](uint64_t bytes) {
    return DataLoss("tar index " + path + " is " + std::to_string(bytes) +
                    " bytes, more than an index of its " + std::to_string(shard_bytes) +
                    "-byte shard can be (" + std::to_string(max_bytes) + ")");
  };
  ASSIGN_OR_RETURN(uint64_t size, GetFileSize(path));
  if (size > max_bytes) return too_large(size);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  if (text.size() > max_bytes) return too_large(text.size());  // it grew since
  return ParseTarIndex(text, path, shard_bytes);
}

Status CheckTarIndexGrouping(const std::vector<TarIndexSample>& samples,
                             const std::string& index_path) {
  std::string_view previous_key;
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::vector<TarIndexMember>& members = samples[i].members;
    std::string_view key;
    for (size_t k = 0; k < members.size(); ++k) {
      const TarIndexMember& m = members[k];
      auto bad = [&](const std::string& why) {
        return DataLoss("tar index " + index_path + ":" + std::to_string(i + 2) + ": member " +
                        std::to_string(k + 1) + " \"" + m.name + "\" " + why +
                        ", so the shard's reader groups its samples otherwise");
      };
      const std::optional<std::pair<std::string_view, std::string_view>> split =
          SplitSampleName(m.name);
      if (!split || IsSampleMetadataName(m.name)) return bad("is no sample's member");
      if (split->second != m.ext) {
        return bad("has the extension \"" + std::string(split->second) + "\", not \"" + m.ext +
                   "\"");
      }
      if (k == 0) {
        key = split->first;
        if (i > 0 && key == previous_key) {
          return bad("has the key of the sample before it, of which it is a member");
        }
      } else if (split->first != key) {
        return bad("has another key than the sample's first member");
      }
    }
    previous_key = key;
  }
  return Status::OK();
}

uint64_t TarSampleStart(const std::vector<TarIndexSample>& samples, size_t i) {
  return i == 0 ? 0 : samples[i - 1].padded_end();
}

TarSamplesScan ScanTarSamples(const std::string& shard_path, size_t max_samples,
                              bool headers_only) {
  RecordReaderOptions options;
  options.stream.buffer_bytes = headers_only ? kTarBlockBytes : kCheckBufferBytes;
  // Every sample is indexed as it lies, however large.
  options.stream.max_held_record_bytes = std::numeric_limits<uint64_t>::max();
  options.keep_tar_members = true;
  TarSamplesScan scan;
  Result<std::unique_ptr<TarSampleReader>> reader = TarSampleReader::Open(shard_path, options);
  if (!reader.ok()) {
    scan.damage = reader.status();
    return scan;
  }
  while (scan.samples.size() < max_samples) {
    bool eof = false;
    Status s = (*reader)->SkipRecord(&eof);
    if (!s.ok() && !(*reader)->can_continue()) {
      scan.damage = s;
      return scan;
    }
    if (eof) return scan;
    TarIndexSample& sample = scan.samples.emplace_back();
    for (const TarSampleMember& m : (*reader)->members()) {
      sample.members.push_back(
          TarIndexMember{std::string(m.extension()), m.data_offset, m.size, m.name});
    }
  }
  return scan;
}

Result<std::vector<TarIndexSample>> BuildTarIndex(const std::string& shard_path) {
  TarSamplesScan scan = ScanTarSamples(shard_path);
  RETURN_IF_ERROR(scan.damage);
  for (const TarIndexSample& sample : scan.samples) {
    for (const TarIndexMember& m : sample.members) {
      if (std::any_of(m.name.begin(), m.name.end(), [](char c) { return IsSpace(c); })) {
        return InvalidArgument(shard_path + ":" + std::to_string(m.offset) + ": tar member \"" +
                               m.name +
                               "\" has whitespace in its name, which a tar index cannot hold");
      }
    }
  }
  return std::move(scan.samples);
}

Result<TarIndexChecker> TarIndexChecker::Open(const std::string& shard_path,
                                              const RecordReaderOptions& options,
                                              std::string index_name) {
  ASSIGN_OR_RETURN(std::unique_ptr<TarSampleReader> reader,
                   TarSampleReader::Open(shard_path, CheckOptions(options, 0)));
  if (index_name.empty()) index_name = IndexPathFor(shard_path);
  return TarIndexChecker(std::move(index_name), std::move(reader));
}

Status TarIndexChecker::Check(const std::vector<TarIndexSample>& samples, size_t i) {
  const std::string where = index_name_ + ":" + std::to_string(i + 2) + " (sample at " +
                            std::to_string(TarSampleStart(samples, i)) + ")";
  bool eof = false;
  Status s = reader_->SkipRecord(&eof);
  if (!s.ok() && !reader_->can_continue()) {
    return DataLoss("tar index " + where + ": the shard does not read there: " + s.message());
  }
  if (eof) return DataLoss("tar index " + where + ": the shard ends before it");
  RETURN_IF_ERROR(CompareSample(*reader_, samples[i], where));
  length_ = s.ok() ? reader_->skipped_example_bytes() : reader_->record_length();
  return Status::OK();
}

Status CheckTarIndexEnds(const std::string& shard_path, const std::vector<TarIndexSample>& samples,
                         const RecordReaderOptions& options) {
  RETURN_IF_ERROR(CheckTarIndexGrouping(samples, IndexPathFor(shard_path)));
  // Reads sample i from where the index says it starts: a reader left after it.
  auto check_sample = [&](size_t i) -> Result<std::unique_ptr<TarSampleReader>> {
    const uint64_t start = TarSampleStart(samples, i);
    ASSIGN_OR_RETURN(std::unique_ptr<TarSampleReader> reader,
                     TarSampleReader::Open(shard_path, CheckOptions(options, start)));
    const std::string where = IndexPathFor(shard_path) + ":" + std::to_string(i + 2) +
                              " (sample at " + std::to_string(start) + ")";
    bool eof = false;
    Status s = reader->SkipRecord(&eof);
    if (!s.ok() && !reader->can_continue()) {
      return DataLoss("tar index " + where + ": the shard does not read there: " + s.message());
    }
    if (eof) return DataLoss("tar index " + where + ": the shard ends before it");
    RETURN_IF_ERROR(CompareSample(*reader, samples[i], where));
    return reader;
  };
  // Inner samples with more than a header before a member: something lies there that the index
  // does not list. The reader skips some of it (a folder, metadata, a long name's extended
  // header) but makes samples of the rest (a member wds2idx skips, such as "dir/.hidden", or one
  // whose entry was deleted), so each such sample is read; many of them, and the shard is.
  std::vector<size_t> gapped;
  uint64_t end = samples.empty() ? 0 : samples[0].padded_end();
  for (size_t i = 1; i < samples.size(); ++i) {
    bool gap = false;
    for (const TarIndexMember& m : samples[i].members) {
      gap = gap || m.offset - end > kTarBlockBytes;  // ParseTarIndex: offset >= end + 512
      end = m.offset + (m.size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
    }
    if (gap && i + 1 < samples.size()) gapped.push_back(i);
    if (gapped.size() > kMaxGappedSampleReads) {
      return DataLoss("tar index " + IndexPathFor(shard_path) + ": more than " +
                      std::to_string(kMaxGappedSampleReads) +
                      " of its samples have members it does not list before them or between "
                      "theirs (folders, long names, members it leaves out): checking it reads "
                      "as much as counting the shard");
    }
  }
  std::unique_ptr<TarSampleReader> reader;
  if (samples.empty()) {
    ASSIGN_OR_RETURN(reader, TarSampleReader::Open(shard_path, CheckOptions(options, 0)));
  } else {
    if (samples.size() > 1) RETURN_IF_ERROR(check_sample(0).status());
    for (size_t i : gapped) RETURN_IF_ERROR(check_sample(i).status());
    ASSIGN_OR_RETURN(reader, check_sample(samples.size() - 1));
  }
  bool eof = false;
  Status s = reader->SkipRecord(&eof);
  if (!eof) {
    return DataLoss("tar index " + IndexPathFor(shard_path) + ": the shard has more than its " +
                    std::to_string(samples.size()) + " samples" +
                    (s.ok() ? std::string() : ": " + s.message()));
  }
  return s;
}

}  // namespace sluice

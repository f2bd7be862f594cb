#include "formats/tar_sample_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

#include "formats/compression.h"

namespace sluice {
namespace {

// Extended headers (pax records, GNU long names) are held while parsed; real ones are a few
// hundred bytes, so a larger one is damage, not a name.
constexpr uint64_t kMaxExtendedHeaderBytes = 1 << 20;
// A `cls` member is an integer in ASCII; one longer than this is not, and is not held.
constexpr uint64_t kMaxClsBytes = 4096;
// What one member costs beyond its name and data while its sample is assembled: its entry in
// the sample's extensions and parts, and its Example framing.
constexpr uint64_t kMemberOverheadBytes = 128;
// A feature's Example framing without its key: five tags and length varints.
constexpr size_t kExampleFramingBytes = 5 * 11;
// Payloads at least this long go from the file straight into the sample, not through buf_.
constexpr size_t kDirectReadChunk = 16 << 20;

// The whitespace Python's str.strip() removes from an ASCII string (tarfile's nti, int()).
bool IsPythonSpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

std::string_view StripPythonSpace(std::string_view s) {
  while (!s.empty() && IsPythonSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsPythonSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A NUL-terminated field (tarfile's nts).
std::string_view FieldString(const char* p, size_t n) {
  const void* nul = std::memchr(p, '\0', n);
  return {p, nul != nullptr ? static_cast<size_t>(static_cast<const char*>(nul) - p) : n};
}

// A numeric header field as tarfile's nti reads it: octal ASCII (NUL-terminated, surrounding
// whitespace allowed, empty = 0) or GNU base-256 (first byte 0x80; 0xff is negative). nullopt:
// not a number, negative, or over 64 bits.
std::optional<uint64_t> ParseNumber(const char* p, size_t n) {
  const auto first = static_cast<unsigned char>(p[0]);
  if (first == 0x80 || first == 0xff) {
    if (first == 0xff) return std::nullopt;
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56 != 0) return std::nullopt;
      v = (v << 8) | static_cast<unsigned char>(p[i]);
    }
    return v;
  }
  const std::string_view digits = StripPythonSpace(FieldString(p, n));
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '7' || v >> 61 != 0) return std::nullopt;
    v = (v << 3) | static_cast<uint64_t>(c - '0');
  }
  return v;
}

// A decimal integer with an optional sign, surrounding whitespace allowed (Python's int() of
// ASCII bytes, without its underscores).
std::optional<int64_t> ParseDecimal(std::string_view s) {
  s = StripPythonSpace(s);
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (limit - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

bool IsZeroBlock(const char* p) {
  for (size_t i = 0; i < kTarBlockBytes; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// tarfile's calc_chksums: the checksum field counts as spaces; unsigned and signed sums.
std::pair<int64_t, int64_t> HeaderChecksums(const char* p) {
  int64_t unsigned_sum = 8 * ' ', signed_sum = 8 * ' ';
  for (size_t i = 0; i < kTarBlockBytes; ++i) {
    if (i >= 148 && i < 156) continue;
    unsigned_sum += static_cast<unsigned char>(p[i]);
    signed_sum += static_cast<signed char>(p[i]);
  }
  return {unsigned_sum, signed_sum};
}

std::string Quoted(std::string_view name) {
  constexpr size_t kShown = 200;
  std::string out = "'";
  out.append(name.substr(0, kShown));
  if (name.size() > kShown) out += "...";
  return out + "'";
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

// A plain file that steps over payloads nobody wants by seeking, so counting a shard's samples
// reads its headers only.
class SeekableFile final : public SequentialFile {
 public:
  static Result<std::unique_ptr<SeekableFile>> Open(const std::string& path, uint64_t offset) {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus(errno, "open", path);
    UniqueFd owned(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat", path);
    if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint only
    if (offset > 0 && ::lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) {
      return ErrnoStatus(errno, "seek", path);
    }
    return std::unique_ptr<SeekableFile>(new SeekableFile(path, std::move(owned)));
  }

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    ssize_t r;
    do {
      r = ::read(fd_.get(), scratch, n);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return ErrnoStatus(errno, "read", path_);
    *bytes_read = static_cast<size_t>(r);
    return Status::OK();
  }

  const std::string& name() const override { return path_; }

  // Steps over the next n bytes, never past the end of the file; *skipped: how many there were
  // (fewer than n only at the end of the file).
  Status Skip(uint64_t n, uint64_t* skipped) {
    *skipped = 0;
    const off_t at = ::lseek(fd_.get(), 0, SEEK_CUR);
    struct stat st {};
    if (at < 0 || ::fstat(fd_.get(), &st) != 0) return ErrnoStatus(errno, "seek", path_);
    const auto here = static_cast<uint64_t>(at);
    const auto size = static_cast<uint64_t>(st.st_size);
    const uint64_t step = std::min(n, size > here ? size - here : 0);
    if (::lseek(fd_.get(), static_cast<off_t>(here + step), SEEK_SET) < 0) {
      return ErrnoStatus(errno, "seek", path_);
    }
    *skipped = step;
    return Status::OK();
  }

 private:
  SeekableFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  std::string path_;
  UniqueFd fd_;
};

// base_plus_ext's r"^((?:.*/|)[^.]+)[.]([^/]*)$", matched the way Python's backtracking does:
// `.*/` ends at each slash from the last to the first, then at none; the key runs from there to
// the first dot after at least one other character, and the extension holds no slash.
std::optional<std::pair<std::string_view, std::string_view>> SplitSampleName(
    std::string_view name) {
  const size_t last_slash = name.rfind('/');
  size_t from = last_slash;  // the slash `.*/` ends at; npos: the empty alternative
  for (;;) {
    const size_t start = from == std::string_view::npos ? 0 : from + 1;
    const bool newline_in_prefix =
        from != std::string_view::npos && name.substr(0, from).find('\n') != std::string_view::npos;
    const size_t dot = name.find('.', start);
    if (!newline_in_prefix && dot != std::string_view::npos && dot > start &&
        (last_slash == std::string_view::npos || dot > last_slash)) {
      return std::make_pair(name.substr(0, dot), name.substr(dot + 1));
    }
    if (from == std::string_view::npos) return std::nullopt;
    from = from == 0 ? std::string_view::npos : name.rfind('/', from - 1);
  }
}

bool IsSampleMetadataName(std::string_view name) {
  const size_t slash = name.find('/');
  const std::string_view top = name.substr(0, slash);
  const bool dunder =
      top.size() >= 2 && top.substr(0, 2) == "__" && top.substr(top.size() - 2) == "__";
  // Without a slash: tar_file_iterator's meta_prefix/meta_suffix test ("__" counts); under one:
  // skip_meta's r"__[^/]*__($|/)" (at least four characters).
  return slash == std::string_view::npos ? dunder : dunder && top.size() >= 4;
}

Result<Compression> DetectTarCompression(const std::string& path) {
  ASSIGN_OR_RETURN(std::string head, ReadFileHead(path, 2));
  const bool gzip = head.size() == 2 && head[0] == '\x1f' && head[1] == '\x8b';
  return gzip ? Compression::kGzip : Compression::kNone;
}

Result<std::unique_ptr<TarSampleReader>> TarSampleReader::Open(const std::string& path,
                                                               const RecordReaderOptions& options) {
  const TFRecordReaderOptions& stream = options.stream;
  Compression compression = Compression::kNone;
  if (stream.compression) {
    compression = *stream.compression;
  } else {
    ASSIGN_OR_RETURN(compression, DetectTarCompression(path));
  }
  if (stream.start_offset > 0 && compression != Compression::kNone) {
    return InvalidArgument(path + ": a compressed file can only be read from its start");
  }
  std::unique_ptr<SequentialFile> file;
  if (compression == Compression::kNone && !stream.wrap_stream) {
    ASSIGN_OR_RETURN(file, SeekableFile::Open(path, stream.start_offset));
  } else {
    ASSIGN_OR_RETURN(file, OpenSequentialFile(path, stream.start_offset));
    if (compression != Compression::kNone) file = NewInflatingFile(std::move(file));
    if (stream.wrap_stream) file = stream.wrap_stream(std::move(file));
  }
  return std::make_unique<TarSampleReader>(std::move(file), options,
                                           compression != Compression::kNone);
}

TarSampleReader::TarSampleReader(std::unique_ptr<SequentialFile> file,
                                 const RecordReaderOptions& options, bool compressed)
    : file_(std::move(file)),
      options_(options),
      compressed_(compressed),
      // A sample is read straight into the record it is handed on in (accounted as that
      // record), so the read buffer has all of buffer_bytes.
      buf_(std::max(options.stream.buffer_bytes, kTarBlockBytes)),
      offset_(options.stream.start_offset) {
  seekable_ = dynamic_cast<SeekableFile*>(file_.get());
}

std::string TarSampleReader::warning() const {
  if (!unmarked_end_) return {};
  return "no end-of-archive marker: the shard may be cut short at " + Where(*unmarked_end_);
}

std::string TarSampleReader::Where(uint64_t offset) const {
  std::string w = name() + ":" + std::to_string(offset);
  if (compressed_) w += " (uncompressed)";
  return w;
}

size_t TarSampleReader::FramingBytes(size_t key_size) const {
  // The Example's own header, then __key__, the label and each part's feature.
  size_t n =
      3 * kExampleFramingBytes + kSampleKeyFeature.size() + key_size + options_.label_key.size();
  for (const Part& p : parts_) {
    n += kExampleFramingBytes + std::max(p.extension->size(), options_.image_key.size());
  }
  return n;
}

void TarSampleReader::Reserve(std::string* record, size_t n) const {
  if (record->capacity() >= n) return;
  // Geometric growth for a sample of many small members, but not past the per-record limit.
  const size_t grown = record->capacity() + record->capacity() / 2;
  const uint64_t cap = std::max<uint64_t>(n, options_.stream.max_held_record_bytes);
  record->reserve(static_cast<size_t>(std::min<uint64_t>(std::max(n, grown), cap)));
}

Status TarSampleReader::Fail(Status s) {
  final_status_ = std::move(s);
  return final_status_;
}

Result<size_t> TarSampleReader::Fill(size_t n) {
  return buf_.Fill(n, [this](size_t need, size_t room, char* to, size_t* got) {
    return file_->Read(sparse_ ? need : room, to, got);
  });
}

Result<uint64_t> TarSampleReader::Consume(uint64_t n, std::string* to) {
  uint64_t done = 0;
  while (done < n) {
    const uint64_t rest = n - done;
    if (!buf_.empty()) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(rest, buf_.size()));
      if (to != nullptr) to->append(buf_.data(), take);
      buf_.Consume(take);
      offset_ += take;
      done += take;
      continue;
    }
    if (buf_.at_end()) break;
    if (to == nullptr && seekable_ != nullptr && (sparse_ || rest >= buf_.capacity())) {
      uint64_t skipped = 0;
      RETURN_IF_ERROR(seekable_->Skip(rest, &skipped));
      offset_ += skipped;
      done += skipped;
      if (skipped < rest) buf_.MarkEnd();
      continue;
    }
    if (to != nullptr && rest >= buf_.capacity()) {
      // Grown as the bytes arrive, not to the size the header declares: a damaged or crafted
      // size costs at most what the file holds.
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(rest, kDirectReadChunk));
      const size_t old = to->size();
      to->resize(old + chunk);
      size_t got = 0;
      Status s = file_->Read(chunk, to->data() + old, &got);
      to->resize(old + got);
      RETURN_IF_ERROR(s);
      if (got == 0) {
        buf_.MarkEnd();
        break;
      }
      offset_ += got;
      done += got;
      continue;
    }
    ASSIGN_OR_RETURN(size_t avail,
                     Fill(static_cast<size_t>(std::min<uint64_t>(rest, buf_.capacity()))));
    if (avail == 0) break;
  }
  return done;
}

Status TarSampleReader::ConsumeData(const Member& m, uint64_t n, std::string* to) {
  ASSIGN_OR_RETURN(uint64_t got, Consume(n, to));
  if (got < n) {
    return DataLoss(Where(m.header_offset) + ": tar member " + Quoted(m.name) +
                    " cut short: " + "it declares " + std::to_string(n) +
                    " bytes, the file ends after " + std::to_string(got));
  }
  const uint64_t padding = (kTarBlockBytes - n % kTarBlockBytes) % kTarBlockBytes;
  ASSIGN_OR_RETURN(got, Consume(padding, nullptr));
  if (got < padding) {
    return DataLoss(Where(m.header_offset) + ": the file ends in the padding after tar member " +
                    Quoted(m.name) + " (" + std::to_string(got) + " of " + std::to_string(padding) +
                    " bytes)");
  }
  return Status::OK();
}

Status TarSampleReader::NextMember(Member* m, bool* end) {
  *end = false;
  std::optional<std::string> long_name;  // from a GNU 'L' or a pax path: the first one wins
  uint64_t pax_size = 0;
  bool has_pax_size = false;
  bool pax_sparse = false;
  bool extended = false;  // an extended header was read: a member header must follow
  uint64_t first = offset_;
  for (;;) {
    const uint64_t at = offset_;
    ASSIGN_OR_RETURN(size_t avail, Fill(kTarBlockBytes));
    if (avail == 0) {
      if (extended) {
        return DataLoss(Where(at) + ": the file ends after an extended tar header, before the " +
                        "member header it extends");
      }
      // Between two members, without the end marker (an empty file has none to miss).
      if (at > 0) unmarked_end_ = at;
      *end = true;
      return Status::OK();
    }
    if (avail < kTarBlockBytes) {
      // Zeros only: the end marker, cut short (a header starts with its name, never a zero).
      if (!extended &&
          std::all_of(buf_.data(), buf_.data() + avail, [](char c) { return c == 0; })) {
        buf_.Consume(avail);
        offset_ += avail;
        *end = true;
        return Status::OK();
      }
      return DataLoss(Where(at) + ": tar header cut short: the file ends after " +
                      std::to_string(avail) + " of its " + std::to_string(kTarBlockBytes) +
                      " bytes");
    }
    const char* h = buf_.data();
    if (IsZeroBlock(h)) {
      if (extended) {
        return DataLoss(Where(at) +
                        ": the end of the archive follows an extended tar header, "
                        "before the member header it extends");
      }
      buf_.Consume(kTarBlockBytes);
      offset_ += kTarBlockBytes;
      *end = true;
      return Status::OK();
    }
    const std::optional<uint64_t> stored = ParseNumber(h + 148, 8);
    const auto [unsigned_sum, signed_sum] = HeaderChecksums(h);
    if (!stored || (static_cast<int64_t>(*stored) != unsigned_sum &&
                    static_cast<int64_t>(*stored) != signed_sum)) {
      return DataLoss(Where(at) + ": bad tar header checksum (stored " +
                      (stored ? std::to_string(*stored) : std::string("not a number")) +
                      ", computed " + std::to_string(unsigned_sum) + ")");
    }
    const std::optional<uint64_t> size = ParseNumber(h + 124, 12);
    if (!size) return DataLoss(Where(at) + ": tar header's size field is not a number");
    const char type = h[156];
    std::string base(FieldString(h, 100));
    // The ustar prefix (not in old GNU headers, whose bytes there hold times).
    const bool old_gnu = std::memcmp(h + 257, "ustar  \0", 8) == 0;
    const std::string_view prefix = old_gnu ? std::string_view() : FieldString(h + 345, 155);
    buf_.Consume(kTarBlockBytes);
    offset_ += kTarBlockBytes;

    Member header_member;  // for errors about this header's data
    header_member.header_offset = at;
    header_member.name = base;
    if (type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g') {
      if (*size > kMaxExtendedHeaderBytes) {
        return DataLoss(Where(at) + ": extended tar header of " + std::to_string(*size) +
                        " bytes, over the limit of " + std::to_string(kMaxExtendedHeaderBytes));
      }
      if (type == 'g') {  // global pax records: read past, not applied
        RETURN_IF_ERROR(ConsumeData(header_member, *size, nullptr));
        if (!extended) first = offset_;
        continue;
      }
      std::string data;
      RETURN_IF_ERROR(ConsumeData(header_member, *size, &data));
      extended = true;
      if (type == 'L') {
        if (!long_name) long_name = std::string(FieldString(data.data(), data.size()));
      } else if (type != 'K') {
        // pax records: "<length> <keyword>=<value>\n", as tarfile's _proc_pax checks them. Of
        // a keyword repeated in one header the last counts (tarfile reads them into a dict); of
        // two headers before one member the first (tarfile applies the outer one last).
        std::optional<std::string_view> path, size_value;
        size_t p = 0;
        while (p < data.size() && data[p] != '\0') {
          auto bad = [&] {
            return DataLoss(Where(at) + ": pax header record at byte " + std::to_string(p) +
                            " does not parse");
          };
          const size_t space = data.find(' ', p);
          if (space == std::string::npos || space == p || space - p > 19) return bad();
          uint64_t length = 0;
          for (size_t i = p; i < space; ++i) {
            if (data[i] < '0' || data[i] > '9') return bad();
            length = length * 10 + static_cast<uint64_t>(data[i] - '0');
          }
          if (length < 5 || length > data.size() - p || data[p + length - 1] != '\n' ||
              space + 1 > p + length - 1) {
            return bad();
          }
          const std::string_view record(data.data() + space + 1, p + length - 1 - (space + 1));
          const size_t eq = record.find('=');
          if (eq == std::string_view::npos || eq == 0) return bad();
          const std::string_view keyword = record.substr(0, eq);
          const std::string_view value = record.substr(eq + 1);
          if (keyword == "path") {
            path = value;
          } else if (keyword == "size") {
            size_value = value;
          } else if (keyword.substr(0, 11) == "GNU.sparse.") {
            pax_sparse = true;
          }
          p += length;
        }
        if (path && !long_name) {
          std::string_view v = *path;
          while (!v.empty() && v.back() == '/') v.remove_suffix(1);
          long_name = std::string(v);
        }
        if (size_value && !has_pax_size) {
          const std::optional<int64_t> v = ParseDecimal(*size_value);
          if (!v || *v < 0) {
            return DataLoss(Where(at) + ": pax header's size " + Quoted(*size_value) +
                            " is not a number");
          }
          pax_size = static_cast<uint64_t>(*v);
          has_pax_size = true;
        }
      }
      continue;
    }

    // A member header. tarfile's types: regular '0', '\0' (a directory when its name ends in a
    // slash), '7' and GNU sparse 'S'; links, devices, directories and FIFOs have no data
    // whatever their size says; any other type's data is skipped by its size.
    const bool dir = type == '5' || (type == '\0' && !base.empty() && base.back() == '/');
    const bool regular = !dir && (type == '0' || type == '\0' || type == '7' || type == 'S');
    const bool no_data = dir || (type >= '1' && type <= '6');
    const uint64_t data_size = has_pax_size && type != 'S' && !pax_sparse ? pax_size : *size;
    std::string name;
    if (long_name) {
      name = std::move(*long_name);
      if (dir) {
        while (!name.empty() && name.back() == '/') name.pop_back();
      }
    } else {
      if (dir) {
        while (!base.empty() && base.back() == '/') base.pop_back();
      }
      name = !prefix.empty() && type != 'S' ? std::string(prefix) + "/" + base : base;
    }
    header_member.name = name;
    const std::optional<std::pair<std::string_view, std::string_view>> split =
        regular && !IsSampleMetadataName(name) ? SplitSampleName(name) : std::nullopt;
    if (!split) {
      if (!no_data) RETURN_IF_ERROR(ConsumeData(header_member, data_size, nullptr));
      long_name.reset();
      has_pax_size = false;
      pax_sparse = false;
      extended = false;
      first = offset_;
      continue;
    }
    m->key_size = split->first.size();
    m->name = std::move(name);
    m->header_offset = first;
    m->data_offset = offset_;
    m->size = data_size;
    m->sparse = type == 'S' || pax_sparse;
    return Status::OK();
  }
}

Status TarSampleReader::ReadRecordInto(std::string* record, bool* end_of_file) {
  return Next(record, /*skip=*/false, end_of_file);
}

Status TarSampleReader::SkipRecord(bool* end_of_file) {
  return Next(nullptr, /*skip=*/true, end_of_file);
}

Status TarSampleReader::Next(std::string* record, bool skip, bool* end_of_file) {
  *end_of_file = false;
  if (!final_status_.ok()) return final_status_;
  record_length_ = 0;
  example_bytes_ = 0;
  record_end_ = 0;
  members_.clear();
  members_kept_ = options_.keep_tar_members;
  // A sample nobody wants, from a plain file: its headers are read one by one and its payloads
  // seeked over, so counting a shard reads little more than its headers.
  sparse_ = skip && seekable_ != nullptr;
  if (!pending_) {
    record_offset_ = offset_;
    bool end = archive_end_;
    if (!end) {
      Member m;
      Status s = NextMember(&m, &end);
      if (!s.ok()) return Fail(std::move(s));
      if (!end) pending_ = std::move(m);
    }
    if (end) {
      archive_end_ = true;
      *end_of_file = true;
      return Status::OK();
    }
  }
  Member member = std::move(*pending_);
  pending_.reset();
  record_offset_ = member.header_offset;
  const std::string key(member.key());
  const uint64_t max_held = options_.stream.max_held_record_bytes;
  if (record != nullptr) record->clear();
  // The sample's extensions, its payloads laid back to back in *record (stream order).
  std::unordered_set<std::string> extensions;
  parts_.clear();
  // What holding the sample costs: its key, and each member's name, data and bookkeeping.
  uint64_t held = key.size() + kMemberOverheadBytes;
  // What members_ holds: each member's name and its fixed cost, within the same limit.
  uint64_t kept = key.size() + kMemberOverheadBytes;
  std::optional<int64_t> label;
  Status problem;  // the sample's first InvalidArgument
  bool refused = false;
  // Members whose extension is the image or the label key: wrong only where the image or the
  // label is written under that key too (checked once the sample's image is known).
  std::string image_key_member, label_key_member;
  for (;;) {
    std::string ext = AsciiLower(member.extension());
    const std::string at = Where(member.header_offset) + ": tar member " + Quoted(member.name);
    auto sample_error = [&](const std::string& what) {
      if (problem.ok()) problem = InvalidArgument(at + " " + what);
    };
    if (member.sparse) sample_error("is a GNU sparse file, which cannot be read");
    if (members_kept_) {
      kept += member.name.size() + kMemberOverheadBytes;
      if (kept > max_held) {
        members_kept_ = false;
        std::vector<TarSampleMember>().swap(members_);
      } else {
        members_.push_back(
            TarSampleMember{member.name, member.key_size, member.data_offset, member.size});
      }
    }
    record_length_ += member.size;
    held += member.name.size() + kMemberOverheadBytes + member.size;
    if (!refused && held > max_held) {
      refused = true;
      std::unordered_set<std::string>().swap(extensions);
      parts_.clear();
      if (record != nullptr) std::string().swap(*record);
    }
    const std::string* extension = nullptr;  // its copy in `extensions`
    if (!refused) {
      if (ext == kSampleKeyFeature) {
        sample_error("repeats the extension '" + ext + "' in sample " + Quoted(key));
      } else {
        auto [it, inserted] = extensions.insert(std::move(ext));
        extension = &*it;  // stable: the set's nodes do not move
        if (!inserted) sample_error("repeats the extension '" + *it + "' in sample " + Quoted(key));
      }
    }
    const std::string_view e = extension != nullptr ? std::string_view(*extension) : ext;
    if (e == options_.image_key && image_key_member.empty()) image_key_member = at;
    if (e != "cls" && !options_.label_key.empty() && e == options_.label_key &&
        label_key_member.empty()) {
      label_key_member = at;
    }
    std::string* to = nullptr;
    std::string cls;
    if (e == "cls" && !options_.label_key.empty()) {
      if (member.size <= kMaxClsBytes) {
        to = &cls;
      } else {
        sample_error("of " + std::to_string(member.size) + " bytes is not an integer label");
      }
    } else if (!refused && problem.ok()) {
      const size_t size = static_cast<size_t>(member.size);
      parts_.push_back(Part{extension, size});
      if (!skip) {
        // Room for the payload where it is read and, when it is large, for the framing the
        // Example adds around the sample, so the record is not copied to grow.
        Reserve(record,
                record->size() + size + (size >= buf_.capacity() ? FramingBytes(key.size()) : 0));
        to = record;
      }
    }
    Status s = ConsumeData(member, member.size, to);
    if (!s.ok()) return Fail(std::move(s));
    record_end_ =
        member.data_offset + (member.size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
    if (to == &cls) {
      label = ParseDecimal(cls);
      if (!label) sample_error("is not an integer label: " + Quoted(cls));
    }

    Member next;
    bool end = false;
    s = NextMember(&next, &end);
    if (!s.ok()) return Fail(std::move(s));
    if (end) {
      archive_end_ = true;
      break;
    }
    if (next.key() != key) {
      pending_ = std::move(next);
      break;
    }
    member = std::move(next);
  }
  const std::string* image = nullptr;  // the image member's extension
  if (!refused) {
    // jpg, jpeg, png: webdataset's writer's image handlers, in its order; then webp. Its
    // autodecode decodes all four (IMAGE_EXTENSIONS, PIL's list).
    for (std::string_view ext : {"jpg", "jpeg", "png", "webp"}) {
      auto it = extensions.find(std::string(ext));
      if (image == nullptr && it != extensions.end()) image = &*it;
    }
    if (image != nullptr && *image != options_.image_key && !image_key_member.empty() &&
        problem.ok()) {
      problem =
          InvalidArgument(image_key_member + " has the image key '" + options_.image_key +
                          "' as its extension, where the sample's '" + *image + "' is written");
    }
    if (label && !label_key_member.empty() && problem.ok()) {
      problem = InvalidArgument(label_key_member + " has the label key '" + options_.label_key +
                                "' as its extension, where the sample's cls is written");
    }
  }
  auto refuse = [&](uint64_t bytes) {
    if (record != nullptr) std::string().swap(*record);
    return ResourceExhausted(
        "sample " + Quoted(key) + " at " + Where(record_offset_) + " holds " +
        std::to_string(bytes) + " bytes (its data, names and Example framing), over the limit of " +
        std::to_string(max_held) + " bytes that the memory budget allows one record");
  };
  if (!problem.ok()) return problem;
  if (refused) return refuse(held);

  for (const Part& p : parts_) {
    builder_.AddBytesInPlace(p.extension == image ? std::string_view(options_.image_key)
                                                  : std::string_view(*p.extension),
                             p.size);
  }
  builder_.AddBytes(kSampleKeyFeature, key);
  if (label) builder_.AddInt64(options_.label_key, *label);
  // The framing and the feature keys are not in `held`: the Example itself is checked too, the
  // same way whether the sample is taken or skipped.
  const size_t example_bytes = builder_.Size();
  example_bytes_ = example_bytes;
  if (example_bytes > max_held || skip) {
    builder_.Clear();
    return skip && example_bytes <= max_held ? Status::OK() : refuse(example_bytes);
  }
  Reserve(record, example_bytes);
  builder_.FinishInPlace(record);
  return Status::OK();
}

}  // namespace sluice

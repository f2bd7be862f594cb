#include "formats/compression.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "formats/tfrecord_reader.h"

namespace sluice {
namespace {

// Compressed bytes asked of the base file per read, and deflate output handed to it per append.
constexpr size_t kInputBytes = 256 << 10;
constexpr size_t kOutputBytes = 256 << 10;

// windowBits for inflateInit2: 15 (the largest window) + 32 (accept gzip or zlib headers).
constexpr int kInflateAutoDetect = MAX_WBITS + 32;
// TensorFlow's ZlibCompressionOptions: memLevel 9, default strategy.
constexpr int kMemLevel = 9;

std::string ZlibMessage(const z_stream& z, int rc) {
  if (z.msg != nullptr) return z.msg;
  return "zlib error " + std::to_string(rc);
}

bool LooksLikeTFRecordHeader(std::string_view head) {
  return head.size() >= kTFRecordHeaderBytes && FrameLength(head.data()).has_value();
}

std::optional<Compression> Detect(std::string_view head) {
  if (head.empty() || LooksLikeTFRecordHeader(head)) return Compression::kNone;
  auto byte = [&](size_t i) { return static_cast<uint8_t>(head[i]); };
  if (head.size() >= 2 && byte(0) == 0x1f && byte(1) == 0x8b) return Compression::kGzip;
  // RFC 1950: CM = 8 (deflate), CINFO <= 7, and the 16-bit CMF·FLG is a multiple of 31.
  if (head.size() >= 2 && (byte(0) & 0x0f) == 8 && (byte(0) >> 4) <= 7 &&
      ((byte(0) << 8) | byte(1)) % 31 == 0) {
    return Compression::kZlib;
  }
  return std::nullopt;
}

class InflatingFile final : public SequentialFile {
 public:
  explicit InflatingFile(std::unique_ptr<SequentialFile> base)
      : base_(std::move(base)), in_(kInputBytes) {
    std::memset(&z_, 0, sizeof(z_));
    int rc = inflateInit2(&z_, kInflateAutoDetect);
    if (rc != Z_OK) {
      status_ = ResourceExhausted("inflateInit2 for " + base_->name() + ": " + ZlibMessage(z_, rc));
    } else {
      initialized_ = true;
    }
  }

  ~InflatingFile() override {
    if (initialized_) inflateEnd(&z_);
  }

  InflatingFile(const InflatingFile&) = delete;
  InflatingFile& operator=(const InflatingFile&) = delete;

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    RETURN_IF_ERROR(status_);
    z_.next_out = reinterpret_cast<Bytef*>(scratch);
    // zlib counts in uInt; a larger request is simply served short.
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, UINT32_MAX));
    auto produced = [&] {
      return static_cast<size_t>(z_.next_out - reinterpret_cast<Bytef*>(scratch));
    };
    // What was inflated before an error is returned first; the next call reports the error (the
    // SequentialFile contract: an error comes after every byte before it).
    auto fail = [&](Status s) {
      (void)Remember(s);
      if (produced() == 0) return s;
      *bytes_read = produced();
      return Status::OK();
    };
    while (z_.avail_out > 0) {
      if (z_.avail_in == 0 && !base_eof_) {
        Status refilled = Refill();
        if (!refilled.ok()) return fail(std::move(refilled));
      }
      if (!in_member_) {
        if (z_.avail_in == 0) break;  // clean end: all input consumed between members
        // More input after the end of a member: TensorFlow's readers and gzip(1) both continue
        // with the next member, so concatenated gzip files read as one stream.
        if (members_ > 0) inflateReset(&z_);
        in_member_ = true;
      }
      uInt before_in = z_.avail_in;
      int rc = inflate(&z_, Z_NO_FLUSH);
      consumed_ += before_in - z_.avail_in;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
        ++members_;
      } else if (rc == Z_BUF_ERROR && base_eof_) {
        // No progress is possible and no input is left: the stream was cut short.
        return fail(DataLoss("truncated compressed stream in " + base_->name() + " (ends after " +
                             std::to_string(consumed_) + " compressed bytes)"));
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
        // consumed_ is where inflate stopped, which is at or just after the damage.
        return fail(DataLoss("corrupt compressed data in " + base_->name() +
                             " at compressed offset " + std::to_string(consumed_) + " (" +
                             ZlibMessage(z_, rc) + ")"));
      } else if (rc == Z_MEM_ERROR) {
        return fail(ResourceExhausted("inflate " + base_->name() + ": out of memory"));
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return fail(Internal("inflate " + base_->name() + " at compressed offset " +
                             std::to_string(consumed_) + ": " + ZlibMessage(z_, rc)));
      }
    }
    *bytes_read = produced();
    return Status::OK();
  }

  const std::string& name() const override { return base_->name(); }

 private:
  Status Refill() {
    size_t got = 0;
    RETURN_IF_ERROR(base_->Read(in_.size(), in_.data(), &got));
    z_.next_in = reinterpret_cast<Bytef*>(in_.data());
    z_.avail_in = static_cast<uInt>(got);
    base_eof_ = got == 0;
    return Status::OK();
  }

  // Errors are final: inflate's state after one is undefined.
  Status Remember(Status s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s;
  }

  std::unique_ptr<SequentialFile> base_;
  std::vector<char> in_;
  z_stream z_;
  bool initialized_ = false;
  bool in_member_ = false;  // inside a gzip member or zlib stream that has not ended
  bool base_eof_ = false;   // the base file returned end of file
  uint64_t members_ = 0;    // members (streams) completed
  uint64_t consumed_ = 0;   // compressed bytes given to inflate and consumed by it
  Status status_;
};

class DeflatingFile final : public WritableFile {
 public:
  DeflatingFile(std::unique_ptr<WritableFile> base, Compression c, int level)
      : base_(std::move(base)), out_(kOutputBytes) {
    std::memset(&z_, 0, sizeof(z_));
    // Exactly TensorFlow's choices: a gzip wrapper (windowBits + 16) for GZIP, zlib's for ZLIB.
    int window_bits = c == Compression::kGzip ? MAX_WBITS + 16 : MAX_WBITS;
    int rc = deflateInit2(&z_, level, Z_DEFLATED, window_bits, kMemLevel, Z_DEFAULT_STRATEGY);
    if (rc != Z_OK) {
      status_ = InvalidArgument("deflateInit2 for " + base_->name() + " (level " +
                                std::to_string(level) + "): " + ZlibMessage(z_, rc));
    } else {
      initialized_ = true;
    }
  }

  ~DeflatingFile() override {
    if (initialized_) deflateEnd(&z_);
  }

  DeflatingFile(const DeflatingFile&) = delete;
  DeflatingFile& operator=(const DeflatingFile&) = delete;

  Status Append(std::string_view data) override {
    RETURN_IF_ERROR(status_);
    if (finished_) return FailedPrecondition("append to committed file " + base_->name());
    size_ += data.size();
    while (!data.empty()) {
      size_t chunk = std::min<size_t>(data.size(), UINT32_MAX);
      z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      z_.avail_in = static_cast<uInt>(chunk);
      RETURN_IF_ERROR(Deflate(Z_NO_FLUSH));
      data.remove_prefix(chunk);
    }
    return Status::OK();
  }

  Status Commit() override {
    RETURN_IF_ERROR(status_);
    if (finished_) return FailedPrecondition("file already committed: " + base_->name());
    z_.next_in = nullptr;
    z_.avail_in = 0;
    RETURN_IF_ERROR(Deflate(Z_FINISH));
    finished_ = true;
    return Remember(base_->Commit());
  }

  uint64_t size() const override { return size_; }
  const std::string& name() const override { return base_->name(); }

 private:
  // Runs deflate until it has taken all input (Z_NO_FLUSH) or ended the stream (Z_FINISH),
  // handing each full output buffer to the base file.
  Status Deflate(int flush) {
    while (true) {
      z_.next_out = reinterpret_cast<Bytef*>(out_.data());
      z_.avail_out = static_cast<uInt>(out_.size());
      int rc = deflate(&z_, flush);
      if (rc == Z_STREAM_ERROR) {
        return Remember(Internal("deflate " + base_->name() + ": " + ZlibMessage(z_, rc)));
      }
      size_t produced = out_.size() - z_.avail_out;
      if (produced > 0) {
        RETURN_IF_ERROR(Remember(base_->Append(std::string_view(out_.data(), produced))));
      }
      if (flush == Z_FINISH ? rc == Z_STREAM_END : (z_.avail_in == 0 && z_.avail_out > 0)) {
        return Status::OK();
      }
    }
  }

  Status Remember(Status s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s;
  }

  std::unique_ptr<WritableFile> base_;
  std::vector<char> out_;
  z_stream z_;
  bool initialized_ = false;
  bool finished_ = false;
  uint64_t size_ = 0;
  Status status_;
};

}  // namespace

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kGzip:
      return "gzip";
    case Compression::kZlib:
      return "zlib";
  }
  return "unknown";
}

Result<Compression> ParseCompression(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (lower.empty() || lower == "none") return Compression::kNone;
  if (lower == "gzip") return Compression::kGzip;
  if (lower == "zlib") return Compression::kZlib;
  return InvalidArgument("unknown compression \"" + std::string(name) +
                         "\" (expected none, gzip or zlib)");
}

Compression DetectCompression(std::string_view head) {
  return Detect(head).value_or(Compression::kNone);
}

Result<Compression> DetectFileCompression(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, OpenSequentialFile(path));
  char head[12];
  size_t filled = 0;
  while (filled < sizeof(head)) {
    size_t got = 0;
    RETURN_IF_ERROR(file->Read(sizeof(head) - filled, head + filled, &got));
    if (got == 0) break;
    filled += got;
  }
  std::optional<Compression> c = Detect(std::string_view(head, filled));
  if (!c) {
    return InvalidArgument("cannot detect the compression of " + path +
                           ": it starts with neither a TFRecord header nor a gzip or zlib header");
  }
  return *c;
}

std::unique_ptr<SequentialFile> NewInflatingFile(std::unique_ptr<SequentialFile> base) {
  return std::make_unique<InflatingFile>(std::move(base));
}

std::unique_ptr<WritableFile> NewDeflatingFile(std::unique_ptr<WritableFile> base, Compression c,
                                               int level) {
  return std::make_unique<DeflatingFile>(std::move(base), c, level);
}

}  // namespace sluice

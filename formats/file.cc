#include "formats/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace sluice {

void CloseFd(int fd) { ::close(fd); }

namespace {

Result<UniqueFd> OpenForRead(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  return UniqueFd(fd);
}

// Reads up to n bytes, retrying on EINTR. Returns bytes read (0 at end of file) or -1 with errno.
ssize_t ReadRetrying(int fd, char* buf, size_t n) {
  ssize_t r;
  do {
    r = ::read(fd, buf, n);
  } while (r < 0 && errno == EINTR);
  return r;
}

class PosixSequentialFile final : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    ssize_t r = ReadRetrying(fd_.get(), scratch, n);
    if (r < 0) return ErrnoStatus(errno, "read", path_);
    *bytes_read = static_cast<size_t>(r);
    return Status::OK();
  }

  const std::string& name() const override { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
};

class MemoryFile final : public SequentialFile {
 public:
  MemoryFile(std::string name, std::string contents, int64_t fail_at_offset)
      : name_(std::move(name)), contents_(std::move(contents)), fail_at_(fail_at_offset) {}

  // Bytes before fail_at_ are delivered (a read spanning it is cut short there); the read that
  // starts at fail_at_ fails.
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    if (n == 0) return Status::OK();
    size_t end = contents_.size();
    if (fail_at_ >= 0) {
      if (pos_ >= static_cast<uint64_t>(fail_at_)) {
        return IOError("read " + name_ + ": injected I/O error at offset " +
                       std::to_string(fail_at_));
      }
      end = std::min<size_t>(end, static_cast<size_t>(fail_at_));
    }
    size_t take = std::min(n, end - std::min<size_t>(end, pos_));
    std::memcpy(scratch, contents_.data() + pos_, take);
    pos_ += take;
    *bytes_read = take;
    return Status::OK();
  }

  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  std::string contents_;
  int64_t fail_at_;
  size_t pos_ = 0;
};

class RangesFile final : public SequentialFile {
 public:
  RangesFile(std::string path, UniqueFd fd, std::vector<FileRange> ranges)
      : path_(std::move(path)), fd_(std::move(fd)), ranges_(std::move(ranges)) {}

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    while (n > 0 && next_ < ranges_.size()) {
      const FileRange& range = ranges_[next_];
      if (pos_ == range.length) {
        ++next_;
        pos_ = 0;
        continue;
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n, range.length - pos_));
      const uint64_t at = range.offset + pos_;
      ssize_t r;
      do {
        r = ::pread(fd_.get(), scratch, want, static_cast<off_t>(at));
      } while (r < 0 && errno == EINTR);
      if (r < 0) return ErrnoStatus(errno, "read", path_ + ":" + std::to_string(at));
      if (r == 0) {
        next_ = ranges_.size();  // the file ends here, and with it every later range
        break;
      }
      pos_ += static_cast<uint64_t>(r);
      *bytes_read = static_cast<size_t>(r);
      break;  // a short read is fine: callers loop
    }
    return Status::OK();
  }

  const std::string& name() const override { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
  std::vector<FileRange> ranges_;
  size_t next_ = 0;   // the range being read
  uint64_t pos_ = 0;  // bytes of it read
};

// Writes all of data, retrying on EINTR and short writes.
Status WriteFully(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write", path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

class AtomicFile final : public WritableFile {
 public:
  // Large enough that the syscall cost per byte is negligible for record-sized appends.
  static constexpr size_t kBufferBytes = 1 << 20;

  AtomicFile(std::string path, std::string temp_path, UniqueFd fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(std::move(fd)) {
    buf_.reserve(kBufferBytes);
  }

  ~AtomicFile() override {
    if (!committed_) {
      fd_.Reset();
      ::unlink(temp_path_.c_str());
    }
  }

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  Status Append(std::string_view data) override {
    RETURN_IF_ERROR(status_);
    if (committed_) return FailedPrecondition("append to committed file " + path_);
    size_ += data.size();
    if (buf_.size() + data.size() <= kBufferBytes) {
      buf_.insert(buf_.end(), data.begin(), data.end());
      return Status::OK();
    }
    RETURN_IF_ERROR(Flush());
    if (data.size() >= kBufferBytes) {
      return Remember(WriteFully(fd_.get(), data.data(), data.size(), temp_path_));
    }
    buf_.insert(buf_.end(), data.begin(), data.end());
    return Status::OK();
  }

  Status Commit() override {
    RETURN_IF_ERROR(status_);
    if (committed_) return FailedPrecondition("file already committed: " + path_);
    RETURN_IF_ERROR(Flush());
    // close(2) can report a deferred write error (NFS, quota); it must not be ignored.
    if (::close(fd_.Release()) != 0) return Remember(ErrnoStatus(errno, "close", temp_path_));
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      return Remember(ErrnoStatus(errno, "rename " + temp_path_ + " to", path_));
    }
    committed_ = true;
    return Status::OK();
  }

  uint64_t size() const override { return size_; }
  const std::string& name() const override { return path_; }

 private:
  Status Flush() {
    if (buf_.empty()) return Status::OK();
    Status s = WriteFully(fd_.get(), buf_.data(), buf_.size(), temp_path_);
    buf_.clear();
    return Remember(std::move(s));
  }

  // Errors are sticky: after a failed write the file's contents are unknown.
  Status Remember(Status s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s;
  }

  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  std::vector<char> buf_;
  uint64_t size_ = 0;
  bool committed_ = false;
  Status status_;
};

}  // namespace

Result<std::unique_ptr<SequentialFile>> OpenSequentialFile(const std::string& path,
                                                           uint64_t offset) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenForRead(path));
  // Only a hint: a failure changes nothing about correctness.
  (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  if (offset > 0 && ::lseek(fd.get(), static_cast<off_t>(offset), SEEK_SET) < 0) {
    return ErrnoStatus(errno, "seek", path);
  }
  return std::unique_ptr<SequentialFile>(new PosixSequentialFile(path, std::move(fd)));
}

Result<std::unique_ptr<SequentialFile>> OpenRangesFile(const std::string& path,
                                                       std::vector<FileRange> ranges) {
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].offset < ranges[i - 1].offset + ranges[i - 1].length) {
      return InvalidArgument(path + ": byte ranges to read overlap or go backwards at offset " +
                             std::to_string(ranges[i].offset));
    }
  }
  ASSIGN_OR_RETURN(UniqueFd fd, OpenForRead(path));
  return std::unique_ptr<SequentialFile>(new RangesFile(path, std::move(fd), std::move(ranges)));
}

Result<UniqueFd> OpenForPositionalReads(const std::string& path) { return OpenForRead(path); }

Status ReadFully(int fd, const std::string& path, uint64_t offset, size_t n, char* out) {
  size_t filled = 0;
  while (filled < n) {
    ssize_t r = ::pread(fd, out + filled, n - filled, static_cast<off_t>(offset + filled));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus(errno, "read", path);
    if (r == 0) {
      return DataLoss(path + ":" + std::to_string(offset) + ": the file ends after " +
                      std::to_string(filled) + " of " + std::to_string(n) + " bytes");
    }
    filled += static_cast<size_t>(r);
  }
  return Status::OK();
}

Result<std::string> ReadFileRange(const std::string& path, uint64_t offset, size_t n) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenForRead(path));
  std::string out(n, '\0');
  RETURN_IF_ERROR(ReadFully(fd.get(), path, offset, n, out.data()));
  return out;
}

std::unique_ptr<SequentialFile> NewMemoryFile(std::string name, std::string contents,
                                              int64_t fail_at_offset) {
  return std::make_unique<MemoryFile>(std::move(name), std::move(contents), fail_at_offset);
}

Result<std::unique_ptr<WritableFile>> NewAtomicFile(const std::string& path) {
  // Unique within the process by the counter and across processes by the pid; O_EXCL catches the
  // leftovers of a crashed process that had the same pid.
  static std::atomic<uint64_t> counter{0};
  std::string temp_path;
  int fd;
  do {
    temp_path = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && (errno == EINTR || errno == EEXIST));
  if (fd < 0) return ErrnoStatus(errno, "create", temp_path);
  return std::unique_ptr<WritableFile>(new AtomicFile(path, std::move(temp_path), UniqueFd(fd)));
}

Result<std::string> ReadFileToString(const std::string& path) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenForRead(path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  std::string out(st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0, '\0');
  size_t filled = 0;
  // st_size is only a guess (0 for /proc files, stale if the file grows): read to end of file.
  while (true) {
    if (filled == out.size()) {
      char probe[4096];
      ssize_t r = ReadRetrying(fd.get(), probe, sizeof(probe));
      if (r < 0) return ErrnoStatus(errno, "read", path);
      if (r == 0) break;
      out.append(probe, static_cast<size_t>(r));
      filled += static_cast<size_t>(r);
      continue;
    }
    ssize_t r = ReadRetrying(fd.get(), out.data() + filled, out.size() - filled);
    if (r < 0) return ErrnoStatus(errno, "read", path);
    if (r == 0) break;
    filled += static_cast<size_t>(r);
  }
  out.resize(filled);
  return out;
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, NewAtomicFile(path));
  RETURN_IF_ERROR(file->Append(contents));
  return file->Commit();
}

Result<std::string> ReadFileHead(const std::string& path, size_t n) {
  ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, OpenSequentialFile(path));
  std::string head(n, '\0');
  size_t filled = 0;
  while (filled < n) {
    size_t got = 0;
    RETURN_IF_ERROR(file->Read(n - filled, head.data() + filled, &got));
    if (got == 0) break;
    filled += got;
  }
  head.resize(filled);
  return head;
}

Result<uint64_t> GetFileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  if (S_ISDIR(st.st_mode)) return ErrnoStatus(EISDIR, "stat", path);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace sluice

// The file layer under the record readers and writers: sequential input, atomically committed
// output, and an in-memory input for tests. All failures name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/status.h"

namespace sluice {

// close(2), errors ignored (for UniqueFd: this header stays free of <unistd.h>).
void CloseFd(int fd);

// Owns a file descriptor; closes it (ignoring errors) unless released.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) CloseFd(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A byte stream read front to back. Not thread-safe.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to n bytes into scratch and sets *bytes_read; *bytes_read == 0 means end of file.
  // A short read is not end of file; callers loop.
  virtual Status Read(size_t n, char* scratch, size_t* bytes_read) = 0;
  // The path (or test name) used in error messages.
  virtual const std::string& name() const = 0;
};

// Opens path for sequential reading (posix read(2), with a sequential-access hint), from byte
// `offset` on.
Result<std::unique_ptr<SequentialFile>> OpenSequentialFile(const std::string& path,
                                                           uint64_t offset = 0);

// A byte range of a file.
struct FileRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Opens path to read only `ranges` (ascending, not overlapping), one after the other, as one
// stream: the bytes between them are never read (a rank's own records of a shard whose index says
// where they lie). Where the file ends inside a range the stream ends there. Errors name the path
// and offset.
Result<std::unique_ptr<SequentialFile>> OpenRangesFile(const std::string& path,
                                                       std::vector<FileRange> ranges);

// Reads the first n bytes of path, fewer when the file is shorter (a format's magic).
Result<std::string> ReadFileHead(const std::string& path, size_t n);

// Reads n bytes at offset (pread). A file that ends before them is DataLoss naming path and
// offset.
Result<std::string> ReadFileRange(const std::string& path, uint64_t offset, size_t n);
// The same on a file opened once (OpenForPositionalReads) for many small reads; out holds n bytes.
Result<UniqueFd> OpenForPositionalReads(const std::string& path);
Status ReadFully(int fd, const std::string& path, uint64_t offset, size_t n, char* out);

// An in-memory SequentialFile over `contents`. When fail_at_offset is set, a read that reaches that
// offset returns an I/O error there (fault injection for tests).
std::unique_ptr<SequentialFile> NewMemoryFile(std::string name, std::string contents,
                                              int64_t fail_at_offset = -1);

// Output that appears at its path only when committed: bytes go to a temporary file beside the
// target ("<path>.tmp.<pid>.<n>"), Commit() flushes and renames it into place, and destroying an
// uncommitted file removes the temporary. So a crash or an error never leaves a half-written file
// under the real name. Not thread-safe.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // Flushes everything and makes the file visible at its path. After Commit only the destructor
  // may be called.
  virtual Status Commit() = 0;
  // Bytes appended so far (before any compression done by a wrapper).
  virtual uint64_t size() const = 0;
  virtual const std::string& name() const = 0;
};

// Creates the temporary for an atomically committed file at path; the directory must exist.
Result<std::unique_ptr<WritableFile>> NewAtomicFile(const std::string& path);

// Whole-file helpers.
Result<std::string> ReadFileToString(const std::string& path);
Status WriteFileAtomically(const std::string& path, std::string_view contents);
Result<uint64_t> GetFileSize(const std::string& path);

}  // namespace sluice

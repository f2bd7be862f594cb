// The read buffer under the record readers (TFRecord, tar): the bytes of a stream read but not
// consumed yet, made contiguous on demand. Each reader says where bytes come from (its file, or
// a LendingSequentialFile's loans) and how many to ask for; the buffer keeps the window
// [pos, limit), moves it to the front, grows for a frame larger than itself and remembers the
// end of the stream.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "formats/status.h"

namespace sluice {

// Not thread-safe: one per reader.
class StreamBuffer {
 public:
  explicit StreamBuffer(size_t capacity) : buf_(capacity) {}

  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  // The unconsumed bytes: size() of them at data(), valid until the next Fill or Reset.
  const char* data() const { return buf_.data() + pos_; }
  size_t size() const { return limit_ - pos_; }
  bool empty() const { return pos_ == limit_; }
  size_t capacity() const { return buf_.size(); }
  // REQUIRES: n <= size().
  void Consume(size_t n) { pos_ += n; }

  // True once the stream reported its end (to Fill, or to the reader: MarkEnd); Fill reads
  // nothing more after it.
  bool at_end() const { return at_end_; }
  void MarkEnd() { at_end_ = true; }

  // Makes the next n bytes contiguous at data() and returns size(): at least n, fewer only at
  // the end of the stream. What is missing comes from
  //   Status read(size_t need, size_t room, char* to, size_t* got)
  // which puts up to `room` bytes at `to` and sets *got (`need` <= room of them are still
  // missing, or fit before the buffer grows again); *got == 0 is the end of the stream. Unconsumed
  // bytes move to the front first; when n is more than the capacity, the buffer grows as the bytes
  // arrive (not to n up front: a damaged or crafted length costs at most about twice what the
  // stream holds). read's errors come back as they are, with the bytes read before them kept.
  template <typename Read>
  Result<size_t> Fill(size_t n, Read&& read) {
    if (size() >= n || at_end_) return size();
    Compact();
    while (limit_ < n) {
      if (limit_ == buf_.size()) Grow(n);
      const size_t room = buf_.size() - limit_;
      size_t got = 0;
      RETURN_IF_ERROR(read(std::min(n - limit_, room), room, buf_.data() + limit_, &got));
      if (got == 0) {
        at_end_ = true;
        break;
      }
      limit_ += got;
    }
    return limit_;
  }

  // When the buffer grew past `capacity` and holds nothing: back to `capacity` bytes, so a rare
  // large frame does not keep its memory.
  void ShrinkTo(size_t capacity);

 private:
  // Moves the unconsumed bytes to the front.
  void Compact();
  // Grows the full buffer toward n bytes: rounded up to a growth quantum, at most doubled.
  void Grow(size_t n);

  std::vector<char> buf_;
  size_t pos_ = 0;    // first unconsumed byte in buf_
  size_t limit_ = 0;  // one past the last valid byte in buf_
  bool at_end_ = false;
};

}  // namespace sluice

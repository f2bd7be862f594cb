#include "formats/stream_buffer.h"

#include <algorithm>
#include <cstring>

namespace sluice {
namespace {

// A buffer grown for a large frame is rounded up to this, so a run of slightly growing frames
// does not reallocate each time.
constexpr size_t kGrowthQuantum = 1 << 20;

}  // namespace

void StreamBuffer::Compact() {
  if (pos_ == 0) return;
  const size_t avail = limit_ - pos_;
  std::memmove(buf_.data(), buf_.data() + pos_, avail);
  pos_ = 0;
  limit_ = avail;
}

void StreamBuffer::Grow(size_t n) {
  const size_t rounded = (n + kGrowthQuantum - 1) / kGrowthQuantum * kGrowthQuantum;
  buf_.resize(std::min(rounded, std::max(2 * buf_.size(), kGrowthQuantum)));
}

void StreamBuffer::ShrinkTo(size_t capacity) {
  if (buf_.size() <= capacity || pos_ != limit_) return;
  std::vector<char>(capacity).swap(buf_);
  pos_ = limit_ = 0;
}

}  // namespace sluice

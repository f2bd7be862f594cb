#include "pipeline/in_flight_window.h"

#include <algorithm>

namespace sluice {

InFlightWindow::InFlightWindow(int64_t items, int64_t bytes)
    : items_(items),
      bytes_(bytes),
      burst_(std::min<int64_t>(32, std::max<int64_t>(1, items / 8))) {}

bool InFlightWindow::Full(int64_t bytes) const {
  return in_flight_ >= items_ || (bytes_in_flight_ > 0 && bytes_in_flight_ + bytes > bytes_);
}

// Wakes the waiting source once its record fits and either a run of records fits too (a futex
// wake and a context switch per record cost ~1% of the pipeline's CPU) or no record bytes are in
// flight. In the latter case no ReleaseBytes will follow, and the next ReleaseItems may never come
// (the consumer may hold its batches while it waits for the next one), so this release may be the
// last one.
bool InFlightWindow::ShouldWake() const {
  if (waiters_ == 0 || Full(waiting_bytes_)) return false;
  const bool burst = items_ - in_flight_ >= burst_ && bytes_in_flight_ <= bytes_ - bytes_ / 8;
  return burst || bytes_in_flight_ == 0;
}

bool InFlightWindow::Acquire(int64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Full(bytes)) {
    ++waiters_;
    waiting_bytes_ = bytes;
    cv_.wait(lock, [&] { return stopped_ || !Full(bytes); });
    --waiters_;
    if (Full(bytes)) return false;  // stopped
  }
  ++in_flight_;
  bytes_in_flight_ += bytes;
  return true;
}

void InFlightWindow::ReleaseBytes(int64_t bytes) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_in_flight_ -= bytes;
    wake = ShouldWake();
  }
  // Called once per record: skip the futex call when the source is not waiting.
  if (wake) cv_.notify_all();
}

void InFlightWindow::ReleaseItems(uint64_t n) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ -= static_cast<int64_t>(n);
    wake = ShouldWake();
  }
  if (wake) cv_.notify_all();
}

void InFlightWindow::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

}  // namespace sluice

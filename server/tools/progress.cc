#include "server/tools/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace sluice {

namespace {
constexpr int64_t kRedrawIntervalNs = 100'000'000;
}

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      enabled_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { Finish(); }

void Progress::Add(uint64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  if (!enabled_) return;
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - start_).count();
  int64_t next = next_draw_ns_.load(std::memory_order_relaxed);
  if (now < next) return;
  if (!next_draw_ns_.compare_exchange_strong(next, now + kRedrawIntervalNs)) return;
  std::unique_lock<std::mutex> lock(draw_mu_, std::try_to_lock);
  if (lock.owns_lock() && !finished_) Draw(false);
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(draw_mu_);
  if (finished_) return;
  finished_ = true;
  if (enabled_) Draw(true);
}

void Progress::Draw(bool final) {
  uint64_t done = done_.load(std::memory_order_relaxed);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = secs > 0 ? done / secs : 0;
  std::string line;
  if (total_ > 0) {
    constexpr int kWidth = 30;
    double frac = std::min(1.0, static_cast<double>(done) / total_);
    int filled = static_cast<int>(frac * kWidth);
    line = fmt::format("\r{} [{}{}] {}/{} {} ({:.0f}/s)", label_, std::string(filled, '#'),
                       std::string(kWidth - filled, ' '), done, total_, unit_, rate);
  } else {
    line = fmt::format("\r{} {} {} ({:.0f}/s)", label_, done, unit_, rate);
  }
  if (final) line += "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace sluice

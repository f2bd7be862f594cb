// A one-line progress bar on stderr, drawn only when stderr is a terminal (so logs and pipes stay
// clean). Add() is thread-safe and cheap; redraws are throttled to ~10 per second.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace sluice {

class Progress {
 public:
  // total == 0: unknown; shows a count and rate only.
  Progress(std::string label, uint64_t total, std::string unit = "items");
  ~Progress();  // Finish()es
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Add(uint64_t n = 1);
  // Draws the final state and ends the line. Idempotent.
  void Finish();

  bool enabled() const { return enabled_; }

 private:
  void Draw(bool final);

  const std::string label_;
  const uint64_t total_;
  const std::string unit_;
  const bool enabled_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::atomic<int64_t> next_draw_ns_{0};
  std::mutex draw_mu_;  // guards drawing and finished_
  bool finished_ = false;
};

}  // namespace sluice

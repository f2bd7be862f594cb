// An epoch warning a pipeline logs at most once a minute (a small data set repeated forever would
// otherwise log one every epoch): the epochs held back in between are counted and told with the
// next warning that is logged. Not thread-safe: one per warning, on the thread that logs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace sluice {

class EpochWarningLimiter {
 public:
  static constexpr auto kInterval = std::chrono::minutes(1);

  // `held_back`: how the epochs not logged are named, e.g. "epochs over it" in "(and 3 more epochs
  // over it since the last warning, …)".
  explicit EpochWarningLimiter(std::string held_back) : held_back_(std::move(held_back)) {}

  // For an epoch that warrants the warning: nullopt when it is held back (counted); else the
  // suffix to log with it, empty or naming the epochs held back since the last one.
  std::optional<std::string> Admit() {
    const auto now = std::chrono::steady_clock::now();
    if (last_ && now - *last_ < kInterval) {
      ++unlogged_;
      return std::nullopt;
    }
    std::string since;
    if (unlogged_ > 0) {
      since = " (and " + std::to_string(unlogged_) + " more " + held_back_ +
              " since the last warning, not logged: at most one a minute)";
    }
    last_ = now;
    unlogged_ = 0;
    return since;
  }

 private:
  const std::string held_back_;
  std::optional<std::chrono::steady_clock::time_point> last_;
  uint64_t unlogged_ = 0;
};

}  // namespace sluice

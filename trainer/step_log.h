// The training steps' record: a progress line per log window ("step N  loss …  acc …  img/s …
// data-wait …%  step … ms"), the lines of skipped updates, and the totals of TrainSummary.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "trainer/backend.h"
#include "trainer/train_summary.h"

namespace sluice::trainer {

class StepLog {
 public:
  using Clock = std::chrono::steady_clock;

  // fp16: the lines name the loss scale. REQUIRES: log_every >= 1.
  StepLog(std::ostream& log, int64_t log_every, bool fp16)
      : log_(log), log_every_(log_every), fp16_(fp16) {}

  // Step `step` (counted from 1, as a resumed run continues) is done: `samples` images in `time`
  // of wall time, `wait` of it waiting for data. Logs a skipped update at once, and the window's
  // line when `step` is a multiple of log_every or `close_window` (the last step of the run).
  void Add(int64_t step, const StepOutcome& outcome, int64_t samples, Clock::duration time,
           Clock::duration wait, bool close_window);
  // The losses, the last window's loss and accuracy, the throughput and the data wait; NaN
  // losses and accuracy when no step ran.
  void Finish(TrainSummary* summary);

 private:
  std::ostream& log_;
  const int64_t log_every_;
  const bool fp16_;
  std::vector<double> losses_;
  int64_t skipped_ = 0;
  double final_loss_ = 0, train_accuracy_ = 0;  // of the last window logged
  Clock::duration train_time_{}, wait_time_{};
  int64_t train_images_ = 0;
  // The current window.
  double window_loss_ = 0, window_steps_ = 0;
  int64_t window_correct_ = 0, window_images_ = 0;
  Clock::duration window_time_{}, window_wait_{};
};

}  // namespace sluice::trainer

#include "trainer/step_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice::trainer {
namespace {

double Seconds(StepLog::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The log line of a step whose update was skipped. fp16: a gradient overflow is routine (the
// loss scale was too high and backs off), so the line says so rather than sounding an alarm.
std::string SkipMessage(int64_t step, double loss, double norm, bool fp16, float scale,
                        float next_scale) {
  if (fp16 && std::isfinite(loss)) {
    return fmt::format(
        "step {}: gradient overflow at loss scale {:g}; update skipped, scale → {:g}\n", step,
        scale, next_scale);
  }
  return fmt::format("step {}: non-finite {} (loss {}, gradient norm {}); update skipped\n", step,
                     std::isfinite(loss) ? "gradient" : "loss", loss, norm);
}

}  // namespace

void StepLog::Add(int64_t step, const StepOutcome& outcome, int64_t samples, Clock::duration time,
                  Clock::duration wait, bool close_window) {
  const double loss = outcome.result.loss_sum / samples;
  if (outcome.skipped) {
    ++skipped_;
    log_ << SkipMessage(step, loss, outcome.grad_norm, fp16_, outcome.loss_scale,
                        outcome.next_loss_scale.scale);
  }
  train_time_ += time;
  wait_time_ += wait;
  train_images_ += samples;
  losses_.push_back(loss);
  window_loss_ += loss;
  window_steps_ += 1;
  window_correct_ += outcome.result.correct;
  window_images_ += samples;
  window_time_ += time;
  window_wait_ += wait;
  if (step % log_every_ != 0 && !close_window) return;

  final_loss_ = window_loss_ / window_steps_;
  train_accuracy_ = static_cast<double>(window_correct_) / window_images_;
  log_ << fmt::format(
              "step {:>6}  loss {:.4f}  acc {:.3f}  img/s {:.1f}  data-wait {:.1f}%  step "
              "{:.1f} ms{}\n",
              step, final_loss_, train_accuracy_, window_images_ / Seconds(window_time_),
              100.0 * Seconds(window_wait_) / Seconds(window_time_),
              1000.0 * Seconds(window_time_) / window_steps_,
              fp16_ ? fmt::format("  loss-scale {:g}", outcome.next_loss_scale.scale)
                    : std::string())
       << std::flush;
  window_loss_ = window_steps_ = 0;
  window_correct_ = window_images_ = 0;
  window_time_ = window_wait_ = {};
}

void StepLog::Finish(TrainSummary* summary) {
  summary->skipped_updates = skipped_;
  if (losses_.empty()) {
    summary->initial_loss = summary->final_loss = std::numeric_limits<double>::quiet_NaN();
    summary->train_accuracy = std::numeric_limits<double>::quiet_NaN();
  } else {
    summary->initial_loss = losses_.front();
    summary->final_loss = final_loss_;
    summary->train_accuracy = train_accuracy_;
  }
  summary->losses = std::move(losses_);
  summary->images_per_sec = train_images_ / std::max(1e-9, Seconds(train_time_));
  summary->data_wait_fraction = Seconds(wait_time_) / std::max(1e-9, Seconds(train_time_));
}

}  // namespace sluice::trainer

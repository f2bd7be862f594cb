#include "trainer/step_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "trainer/evaluation.h"
#include "trainer/trainer.h"

namespace sluice::trainer {
namespace {

using Clock = StepLog::Clock;

// Linear warm-up to `peak`, then cosine decay to 10% of it at `total` steps.
float LearningRate(const TrainerOptions& o, int64_t step) {
  const int64_t warmup =
      o.warmup_steps >= 0 ? o.warmup_steps : std::min<int64_t>(100, o.steps / 10);
  if (step < warmup) return o.lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const double span = std::max<int64_t>(1, o.steps - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return static_cast<float>(o.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * progress))));
}

}  // namespace

PauseSchedule::PauseSchedule(const TrainerOptions& o, int64_t end_step)
    : checkpoint_every_(!o.checkpoint_dir.empty() && o.checkpoint_every > 0 ? o.checkpoint_every
                                                                            : 0),
      eval_every_(!o.eval_dataset.empty() && o.eval_every > 0 ? o.eval_every : 0),
      end_step_(end_step) {}

StepLoop::StepLoop(const TrainerOptions& o, const ModelConfig& config, int64_t end_step,
                   const PauseSchedule& schedule, Backend& backend, BatchStream& stream,
                   StepLog& step_log, RunPosition* position, std::ostream& log)
    : o_(o),
      config_(config),
      end_step_(end_step),
      schedule_(schedule),
      backend_(backend),
      stream_(stream),
      step_log_(step_log),
      position_(*position),
      log_(log) {}

Status StepLoop::Fetch(std::vector<ReceivedBatch>* batches, Clock::duration* wait) {
  batches->clear();
  for (int k = 0; k < o_.accum && !stream_ended_; ++k) {
    ReceivedBatch batch;
    bool end = false;
    const Clock::time_point wait_start = Clock::now();
    RETURN_IF_ERROR(stream_.Take(&batch, &end).WithContext("training stream"));
    if (wait != nullptr) *wait += Clock::now() - wait_start;
    if (end) {
      stream_ended_ = true;
      break;
    }
    RETURN_IF_ERROR(CheckBatch(batch, config_, o_.dataset));
    batches->push_back(std::move(batch));
  }
  return Status::OK();
}

Result<int> StepLoop::Stage(const std::vector<ReceivedBatch>& batches, int64_t at) {
  staging_.clear();
  for (const ReceivedBatch& b : batches) staging_.push_back({b.images, b.labels});
  return backend_.Stage(staging_, LearningRate(o_, at));
}

Result<bool> StepLoop::RunStep() {
  if (position_.step >= end_step_ || (stream_ended_ && ahead_.empty())) return false;
  const Clock::time_point step_start = Clock::now();
  Clock::duration step_wait{};
  int ticket = ahead_ticket_;
  ahead_ticket_ = -1;
  if (ticket >= 0) {
    current_ = std::move(ahead_);
  } else {
    // The first step, or the one after a pause: nothing was fetched ahead and the device is
    // idle, so the host's wait for these batches is the device's wait for data.
    RETURN_IF_ERROR(Fetch(&current_, &step_wait));
    if (current_.empty()) return false;
    ASSIGN_OR_RETURN(ticket, Stage(current_, position_.step));
  }
  ahead_.clear();
  int64_t samples = 0;
  for (const ReceivedBatch& b : current_) samples += b.meta.n;
  position_.last = current_.back().meta;
  position_.has_position = true;
  // Overlap: the next step is fetched, copied and queued while the device runs this one, unless
  // a pause follows this step; its gap is then excluded from the device's idle time, and the
  // next step's fetch, after the pause, is timed on the host instead.
  if (backend_.overlaps_steps() && position_.step + 1 < end_step_ &&
      !schedule_.pauses_after(position_.step + 1)) {
    RETURN_IF_ERROR(Fetch(&ahead_, nullptr));
    if (!ahead_.empty()) {
      ASSIGN_OR_RETURN(ahead_ticket_, Stage(ahead_, position_.step + 1));
    }
  }
  ASSIGN_OR_RETURN(const StepOutcome outcome, backend_.Step(ticket));
  // Data wait on a device: the time it sat idle before this step.
  step_wait += std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(outcome.idle_seconds));
  const int64_t step = ++position_.step;
  log_ << backend_.TakeNotes();
  step_log_.Add(step, outcome, samples, Clock::now() - step_start, step_wait,
                step == end_step_ || stream_ended_);
  return true;
}

}  // namespace sluice::trainer

// The training steps: each fetches its micro-batches from the training stream, stages them on the
// backend and steps it. On a backend that overlaps steps (CUDA), the next step's batches are
// fetched and staged while the device runs the current one, except before a pause (a checkpoint
// or an evaluation), when the host must see this step's results first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "formats/status.h"
#include "trainer/backend.h"
#include "trainer/checkpointing.h"
#include "trainer/model.h"
#include "trainer/step_log.h"

namespace sluice::trainer {

struct TrainerOptions;

// Which steps (counted from 1) are followed by a checkpoint or an evaluation.
class PauseSchedule {
 public:
  PauseSchedule(const TrainerOptions& o, int64_t end_step);
  bool checkpoint_after(int64_t step) const {
    return checkpoint_every_ > 0 && step % checkpoint_every_ == 0;
  }
  bool eval_after(int64_t step) const {
    return eval_every_ > 0 && step % eval_every_ == 0 && step < end_step_;
  }
  bool pauses_after(int64_t step) const { return checkpoint_after(step) || eval_after(step); }

 private:
  int64_t checkpoint_every_ = 0;  // 0: no periodic checkpoints (or no checkpoint directory)
  int64_t eval_every_ = 0;        // 0: no periodic evaluation (or no eval dataset)
  int64_t end_step_ = 0;
};

class StepLoop {
 public:
  // Steps from position->step up to end_step, advancing *position. The references must outlive
  // the loop.
  StepLoop(const TrainerOptions& o, const ModelConfig& config, int64_t end_step,
           const PauseSchedule& schedule, Backend& backend, BatchStream& stream, StepLog& step_log,
           RunPosition* position, std::ostream& log);
  // Whatever the exit, the backend finishes first, so that no copy still reads a batch whose
  // lease goes.
  ~StepLoop() { backend_.Drain(); }
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // Runs one step. false: none ran, the run is over (end_step reached, or the stream ended).
  Result<bool> RunStep();
  bool stream_ended() const { return stream_ended_; }

 private:
  // Takes one step's micro-batches (fewer at the stream's end; none after it) into *batches,
  // adding the time blocked to *wait unless null.
  Status Fetch(std::vector<ReceivedBatch>* batches, StepLog::Clock::duration* wait);
  // Stages `batches` as step number `at` (counted from 0: its learning rate).
  Result<int> Stage(const std::vector<ReceivedBatch>& batches, int64_t at);

  const TrainerOptions& o_;
  const ModelConfig& config_;
  const int64_t end_step_;
  const PauseSchedule& schedule_;
  Backend& backend_;
  BatchStream& stream_;
  StepLog& step_log_;
  RunPosition& position_;
  std::ostream& log_;
  bool stream_ended_ = false;
  // The micro-batches of the step being run, and of the next one when it has been staged ahead
  // (ahead_ticket_ >= 0). Taken batches: their leases keep them intact until their step is done.
  std::vector<ReceivedBatch> current_, ahead_;
  int ahead_ticket_ = -1;
  std::vector<MicroBatch> staging_;  // Stage's argument, reused
};

}  // namespace sluice::trainer

// A run's checkpoints (file format: trainer/checkpoint.h): what it resumes from, and saving the
// backend's state with the stream position so that a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "client/client.h"
#include "formats/status.h"
#include "trainer/backend.h"
#include "trainer/model.h"

namespace sluice::trainer {

// Where a run stands: optimizer steps done and the last training batch consumed.
struct RunPosition {
  int64_t step = 0;
  bool has_position = false;  // false before the first batch
  BatchMeta last;             // epoch, index and end_record of the last batch consumed
};

// Loads the checkpoint in `dir` into *state and *position and logs "resuming from …"; without
// one (NotFound) logs so and leaves both as they are. fp16: the checkpoint's loss scale, when it
// has one, replaces state->loss_scale, clamped to this run's max_loss_scale. FailedPrecondition
// when it holds another model (config or parameter count); DataLoss and IOError from reading it.
Status ResumeFrom(const std::string& dir, const ModelConfig& config, bool fp16,
                  float max_loss_scale, TrainState* state, RunPosition* position,
                  std::ostream& log);

// Asks `request` to start right after position.last (nothing when !position.has_position).
void StartAfter(const RunPosition& position, v1::StreamRequest* request);

// Writes checkpoints to one directory, each step at most once.
class Checkpointer {
 public:
  // dir empty: Save does nothing. fp16: the loss scale is recorded (0 otherwise).
  Checkpointer(std::string dir, ModelConfig config, bool fp16)
      : dir_(std::move(dir)), config_(config), fp16_(fp16) {}

  // Saves the backend's state at `position`, unless this step's is saved already.
  // REQUIRES: no step staged and not yet stepped.
  Status Save(Backend& backend, const RunPosition& position);

 private:
  const std::string dir_;
  const ModelConfig config_;
  const bool fp16_;
  int64_t saved_step_ = -1;  // the last checkpoint's step: the end need not write it again
};

}  // namespace sluice::trainer

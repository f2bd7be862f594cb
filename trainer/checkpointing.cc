#include "trainer/checkpointing.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "trainer/checkpoint.h"
#include "trainer/loss_scale.h"

namespace sluice::trainer {

Status ResumeFrom(const std::string& dir, const ModelConfig& config, bool fp16,
                  float max_loss_scale, TrainState* state, RunPosition* position,
                  std::ostream& log) {
  Result<Checkpoint> loaded = LoadCheckpoint(dir);
  if (!loaded.ok() && loaded.status().code() != StatusCode::kNotFound) return loaded.status();
  if (!loaded.ok()) {
    log << "no checkpoint in " << dir << "; starting from step 0\n";
    return Status::OK();
  }
  Checkpoint& ck = *loaded;
  const ModelConfig& c = ck.config;
  // The file holds the tensors without the layout's padding (ParameterLayout::Pack).
  const ParameterLayout layout(config);
  if (c != config || static_cast<int64_t>(ck.params.size()) != layout.parameters()) {
    return FailedPrecondition(fmt::format(
        "{} holds a model of image size {}, patch {}, width {}, depth {}, {} classes; this run "
        "asks for {}, {}, {}, {}, {}",
        CheckpointPath(dir), c.image_size, c.patch, c.width, c.depth, c.classes, config.image_size,
        config.patch, config.width, config.depth, config.classes));
  }
  state->params = layout.Unpack(ck.params);
  state->first_moment = layout.Unpack(ck.first_moment);
  state->second_moment = layout.Unpack(ck.second_moment);
  state->adam_updates = ck.adam_updates;
  if (fp16 && ck.loss_scale > 0) {
    // A checkpoint from before the cap was lowered may hold 2^16: resume at the cap instead of
    // skipping steps until the scale backs off.
    state->loss_scale = {std::min(ck.loss_scale, max_loss_scale), ck.loss_scale_good_steps};
  }
  position->step = ck.step;
  position->has_position = ck.has_position;
  position->last.epoch = ck.epoch;
  position->last.index = ck.index;
  position->last.end_record = ck.end_record;
  position->last.shuffle_bytes = ck.shuffle_bytes;
  log << fmt::format("resuming from {} at step {} (stream after batch {}:{})\n",
                     CheckpointPath(dir), position->step, ck.epoch, ck.index);
  return Status::OK();
}

void StartAfter(const RunPosition& position, v1::StreamRequest* request) {
  if (!position.has_position) return;
  request->mutable_start_position()->set_epoch(position.last.epoch);
  request->mutable_start_position()->set_index(position.last.index + 1);
  request->mutable_start_position()->set_end_record(position.last.end_record);
  request->mutable_start_position()->set_shuffle_bytes(position.last.shuffle_bytes);
}

Status Checkpointer::Save(Backend& backend, const RunPosition& position) {
  if (dir_.empty() || saved_step_ == position.step) return Status::OK();
  TrainState state;
  RETURN_IF_ERROR(backend.GetState(&state));
  Checkpoint ck;
  ck.config = config_;
  ck.step = position.step;
  ck.adam_updates = state.adam_updates;
  ck.has_position = position.has_position;
  ck.epoch = position.last.epoch;
  ck.index = position.last.index;
  ck.end_record = position.last.end_record;
  ck.shuffle_bytes = position.last.shuffle_bytes;
  if (fp16_) {
    ck.loss_scale = state.loss_scale.scale;
    ck.loss_scale_good_steps = state.loss_scale.good_steps;
  }
  const ParameterLayout layout(config_);
  ck.params = layout.Pack(state.params);
  ck.first_moment = layout.Pack(state.first_moment);
  ck.second_moment = layout.Pack(state.second_moment);
  RETURN_IF_ERROR(SaveCheckpoint(dir_, ck));
  saved_step_ = position.step;
  return Status::OK();
}

}  // namespace sluice::trainer

#include "trainer/cpu_training_backend.h"

#include <algorithm>
#include <cmath>

namespace sluice::trainer {

CpuTrainingBackend::CpuTrainingBackend(const ModelConfig& config, Precision precision,
                                       const AdamWOptions& adamw,
                                       const LossScaleOptions& loss_scale, const TrainState& state)
    : model_(config, precision),
      fp16_(precision == Precision::kFp16),
      loss_scale_options_(loss_scale),
      optimizer_(model_.layout(), adamw),
      grads_(model_.layout().total()) {
  Assign(state);
}

Result<int> CpuTrainingBackend::Stage(std::span<const MicroBatch> batches, float lr) {
  staged_.assign(batches.begin(), batches.end());
  lr_ = lr;
  return 0;
}

Result<StepOutcome> CpuTrainingBackend::Step(int /*ticket*/) {
  StepOutcome out;
  int64_t samples = 0;
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  for (const MicroBatch& batch : staged_) {
    const StepResult r =
        model_.ForwardBackward(params_, batch.images, batch.labels, grads_, scaler_.scale);
    out.result.loss_sum += r.loss_sum;
    out.result.correct += r.correct;
    samples += static_cast<int64_t>(batch.labels.size());
  }
  staged_.clear();
  // Undo the loss scale with the averaging (the scale is a power of two: exact).
  const float inv = 1.0f / (static_cast<float>(samples) * scaler_.scale);
  for (float& g : grads_) g *= inv;
  const double loss = out.result.loss_sum / samples;
  out.grad_norm = GlobalNorm(grads_);
  out.loss_scale = scaler_.scale;
  const bool finite_grad = std::isfinite(out.grad_norm);
  if (fp16_) UpdateLossScale(&scaler_, finite_grad, loss_scale_options_);
  out.next_loss_scale = scaler_;
  if (std::isfinite(loss) && finite_grad) {
    optimizer_.Update(params_, grads_, out.grad_norm, lr_);
  } else {
    out.skipped = true;
  }
  return out;
}

Result<StepResult> CpuTrainingBackend::Evaluate(const MicroBatch& batch) {
  return model_.Forward(params_, batch.images, batch.labels);
}

Status CpuTrainingBackend::GetState(TrainState* state) {
  state->params = params_;
  state->first_moment = optimizer_.first_moment();
  state->second_moment = optimizer_.second_moment();
  state->adam_updates = optimizer_.updates();
  state->loss_scale = scaler_;
  return Status::OK();
}

Status CpuTrainingBackend::SetState(const TrainState& state) {
  Assign(state);
  return Status::OK();
}

void CpuTrainingBackend::Assign(const TrainState& state) {
  params_ = state.params;
  optimizer_.first_moment() = state.first_moment;
  optimizer_.second_moment() = state.second_moment;
  optimizer_.set_updates(state.adam_updates);
  scaler_ = state.loss_scale;
}

}  // namespace sluice::trainer

// The Backend (trainer/backend.h) on the CPU: trainer/cpu_backend.h's forward and backward
// passes, the host AdamW (trainer/adamw.h) and, in fp16, the loss scale kept on the host. Stage
// only records the step's batches; Step runs them, one after the other, and the update.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainer/adamw.h"
#include "trainer/backend.h"
#include "trainer/cpu_backend.h"
#include "trainer/loss_scale.h"
#include "trainer/model.h"
#include "trainer/precision.h"

namespace sluice::trainer {

class CpuTrainingBackend final : public Backend {
 public:
  // The weights, moments and loss scale come from `state` (SetState's REQUIRES).
  // REQUIRES: state's vectors hold ParameterLayout(config).total() values each.
  CpuTrainingBackend(const ModelConfig& config, Precision precision, const AdamWOptions& adamw,
                     const LossScaleOptions& loss_scale, const TrainState& state);

  Result<int> Stage(std::span<const MicroBatch> batches, float lr) override;
  Result<StepOutcome> Step(int ticket) override;
  bool overlaps_steps() const override { return false; }
  Result<StepResult> Evaluate(const MicroBatch& batch) override;
  Status GetState(TrainState* state) override;
  Status SetState(const TrainState& state) override;
  LossScaleState loss_scale() const override { return scaler_; }

 private:
  void Assign(const TrainState& state);

  CpuBackend model_;
  const bool fp16_;
  const LossScaleOptions loss_scale_options_;
  AdamW optimizer_;  // holds a reference to model_.layout()
  std::vector<float> params_, grads_;
  LossScaleState scaler_;
  // The staged step.
  std::vector<MicroBatch> staged_;
  float lr_ = 0;
};

}  // namespace sluice::trainer

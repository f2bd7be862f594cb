// The Backend (trainer/backend.h) on a CUDA device: trainer/cuda_backend.h with the weights, the
// optimizer and the loss scale on the device. Stage copies each micro-batch to the device on
// the copy stream and enqueues its step, so the next step's copies overlap this one's compute;
// Step waits for it and reports the device's idle time before it as its data wait.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "trainer/backend.h"
#include "trainer/cuda_backend.h"

namespace sluice::trainer {

class CudaTrainingBackend final : public Backend {
 public:
  // Creates the device backend with `state`'s weights, moments and loss scale, then measures a
  // plain pinned copy of `batch_bytes` (counters().h2d_plain_bytes_per_sec). Errors: as
  // CudaBackend::Create and SetState.
  static Result<std::unique_ptr<CudaTrainingBackend>> Create(const ModelConfig& config,
                                                             const CudaBackendOptions& options,
                                                             const TrainState& state,
                                                             size_t batch_bytes);

  Result<int> Stage(std::span<const MicroBatch> batches, float lr) override;
  Result<StepOutcome> Step(int ticket) override;
  bool overlaps_steps() const override { return true; }
  Result<StepResult> Evaluate(const MicroBatch& batch) override;
  Status GetState(TrainState* state) override;
  Status SetState(const TrainState& state) override;
  LossScaleState loss_scale() const override { return loss_scale_; }
  void ExcludeGapFromDataWait() override { gpu_->ExcludeGapFromDataWait(); }
  void Drain() override { gpu_->Synchronize(); }
  std::string TakeNotes() override;
  BackendCounters counters() const override;

 private:
  explicit CudaTrainingBackend(std::unique_ptr<CudaBackend> gpu) : gpu_(std::move(gpu)) {}

  std::unique_ptr<CudaBackend> gpu_;
  LossScaleState loss_scale_;  // as the last step left it (the device keeps its own)
  double h2d_plain_bytes_per_sec_ = 0;
  // What TakeNotes has said already.
  bool noted_graph_ = false, noted_given_up_ = false, noted_epilogue_ = false;
};

}  // namespace sluice::trainer

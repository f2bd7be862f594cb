#include "trainer/cuda_training_backend.h"

#include "trainer/cuda_util.h"

namespace sluice::trainer {

Result<std::unique_ptr<CudaTrainingBackend>> CudaTrainingBackend::Create(
    const ModelConfig& config, const CudaBackendOptions& options, const TrainState& state,
    size_t batch_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> gpu, CudaBackend::Create(config, options));
  std::unique_ptr<CudaTrainingBackend> backend(new CudaTrainingBackend(std::move(gpu)));
  RETURN_IF_ERROR(backend->SetState(state));
  ASSIGN_OR_RETURN(backend->h2d_plain_bytes_per_sec_, MeasurePinnedCopyBandwidth(batch_bytes));
  return backend;
}

Result<int> CudaTrainingBackend::Stage(std::span<const MicroBatch> batches, float lr) {
  int samples = 0;
  for (const MicroBatch& b : batches) samples += static_cast<int>(b.labels.size());
  int ticket = -1;
  for (size_t k = 0; k < batches.size(); ++k) {
    ASSIGN_OR_RETURN(const int slot, gpu_->Stage(batches[k].images, batches[k].labels));
    ASSIGN_OR_RETURN(ticket, gpu_->Enqueue(slot, k == 0, k + 1 == batches.size(),
                                           /*update=*/true, lr, samples));
  }
  return ticket;
}

Result<StepOutcome> CudaTrainingBackend::Step(int ticket) {
  ASSIGN_OR_RETURN(const StepOutcome outcome, gpu_->Wait(ticket));
  loss_scale_ = outcome.next_loss_scale;  // the step updated it on the device
  return outcome;
}

Result<StepResult> CudaTrainingBackend::Evaluate(const MicroBatch& batch) {
  return gpu_->Forward(batch.images, batch.labels);
}

Status CudaTrainingBackend::GetState(TrainState* state) {
  RETURN_IF_ERROR(gpu_->GetParameters(&state->params));
  RETURN_IF_ERROR(
      gpu_->GetOptimizerState(&state->first_moment, &state->second_moment, &state->adam_updates));
  state->loss_scale = loss_scale_;
  return Status::OK();
}

Status CudaTrainingBackend::SetState(const TrainState& state) {
  RETURN_IF_ERROR(gpu_->SetParameters(state.params));
  if (state.adam_updates > 0) {
    RETURN_IF_ERROR(
        gpu_->SetOptimizerState(state.first_moment, state.second_moment, state.adam_updates));
  }
  RETURN_IF_ERROR(gpu_->SetLossScale(state.loss_scale));
  loss_scale_ = state.loss_scale;
  return Status::OK();
}

std::string CudaTrainingBackend::TakeNotes() {
  std::string notes;
  if (!noted_graph_ && !gpu_->graph_error().empty()) {
    noted_graph_ = true;
    notes += "cuda: CUDA Graph capture failed (" + gpu_->graph_error() +
             "); that step ran eagerly, and the capture is tried again\n";
  }
  if (noted_graph_ && gpu_->graphs_given_up() && !noted_given_up_) {
    noted_given_up_ = true;
    notes += "cuda: CUDA Graph capture failed " + std::to_string(CudaBackend::kMaxCaptureFailures) +
             " times (last: " + gpu_->graph_error() + "); every step now launches eagerly\n";
  }
  if (!noted_epilogue_ && gpu_->epilogue_fallbacks() > 0) {
    noted_epilogue_ = true;
    notes +=
        "cuda: cuBLASLt had no fused bias/GELU epilogue for some GEMMs; running those "
        "epilogues as separate kernels\n";
  }
  return notes;
}

BackendCounters CudaTrainingBackend::counters() const {
  BackendCounters c;
  c.h2d_bytes_per_sec = gpu_->h2d_bytes_per_sec();
  c.h2d_plain_bytes_per_sec = h2d_plain_bytes_per_sec_;
  c.graph_launches = gpu_->graph_launches();
  c.eager_launches = gpu_->eager_launches();
  c.graphs_given_up = noted_given_up_;
  c.staged_in_place = gpu_->staged_in_place();
  c.staged_via_copy = gpu_->staged_via_copy();
  return c;
}

}  // namespace sluice::trainer

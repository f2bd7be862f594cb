// The trainer's GPU backend: the model of trainer/model.h, the maths of trainer/cpu_backend.h
// (checked against it by tests/trainer/cuda_backend_test.cc, within bf16 tolerance), bf16 GEMMs
// with fp32 accumulation on cuBLASLt, and the optimizer on the device: fp32 master weights, Adam
// moments and gradients stay there; the host sees parameters only through Get/Set (checkpoints).
//
// A step is: for each of K micro-batches, Stage (pinned copy + H2D on the copy stream) then
// Enqueue (forward + backward, gradients accumulated); the last Enqueue also runs the gradient
// norm, the non-finite guard, clipping and AdamW, and returns a ticket for Wait. Each distinct
// (slot, ticket, first, last, update, batch size) sequence is captured once into a CUDA Graph and
// replayed (CudaBackendOptions::use_graph); otherwise its kernels are launched one by one.
//
// Two batches in flight: while the device runs step i from slot s, the host may Stage batch i+1
// into slot 1-s; Stage blocks only until that slot's previous batch has been consumed.
//
// Thread-safety: one CudaBackend per training loop; its calls must not overlap.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "trainer/adamw.h"
#include "trainer/cpu_backend.h"
#include "trainer/cuda_gemm.h"
#include "trainer/cuda_kernels.h"
#include "trainer/cuda_util.h"
#include "trainer/model.h"

namespace sluice::trainer {

struct CudaBackendOptions {
  int max_batch = 32;  // the largest micro-batch Stage accepts (sizes the activation buffers)
  AdamWOptions adamw;
  bool use_graph = true;        // capture each step shape once and replay it
  bool fused_epilogues = true;  // fc1 bias+GELU in the GEMM's epilogue; false: separate kernel
  int device = 0;
};

struct CudaStepOutcome {
  StepResult result;          // summed over the step's micro-batches
  double grad_norm = 0;       // of the averaged gradient, before clipping (update steps only)
  bool skipped = false;       // loss or gradient not finite: the update was not applied
  double idle_seconds = 0;    // device idle between the previous step's end and this one's start
  double device_seconds = 0;  // this step's span on the device
};

class CudaBackend {
 public:
  static constexpr int kSlots = 2;

  // Errors: FailedPrecondition when there is no usable device; the CUDA error otherwise.
  static Result<std::unique_ptr<CudaBackend>> Create(const ModelConfig& config,
                                                     const CudaBackendOptions& options);
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }

  // Synchronous transfers of the fp32 master weights and the optimizer state.
  // SetParameters also clears the Adam moments and count. REQUIRES: sizes == layout().total().
  Status SetParameters(std::span<const float> params);
  Status SetOptimizerState(std::span<const float> m, std::span<const float> v, int64_t updates);
  Status GetParameters(std::vector<float>* params);
  Status GetOptimizerState(std::vector<float>* m, std::vector<float>* v, int64_t* updates);
  // Σ over the last step's micro-batches of ∂(Σ loss)/∂params (the CPU backend's convention),
  // before averaging and clipping.
  Status GetGradients(std::vector<float>* grads);

  // Copies a batch into the next staging slot and starts its H2D on the copy stream.
  // Returns the slot. REQUIRES: 1 <= labels.size() <= max_batch, images sized to match.
  Result<int> Stage(std::span<const uint8_t> images, std::span<const int32_t> labels);
  // Enqueues forward + backward of staged `slot`. first: zero the step's gradients and sums.
  // last: with `update`, run clipping + AdamW at learning rate `lr` over `step_samples`
  // samples; returns the ticket to Wait on (-1 when !last).
  Result<int> Enqueue(int slot, bool first, bool last, bool update, float lr, int step_samples);
  // Waits for the step of `ticket`. Call it before enqueuing the step after next.
  Result<CudaStepOutcome> Wait(int ticket);

  // One micro-batch step, synchronously (tests): Stage, Enqueue(first, last), Wait.
  Result<CudaStepOutcome> Step(std::span<const uint8_t> images, std::span<const int32_t> labels,
                               float lr, bool update);
  // The forward pass alone (evaluation), synchronously.
  Result<StepResult> Forward(std::span<const uint8_t> images, std::span<const int32_t> labels);

  // Why graph capture was given up (every step since launched eagerly); empty while graphs work.
  const std::string& graph_error() const { return graph_error_; }
  // GEMMs whose bias (+GELU) ran as a separate kernel because cuBLASLt had no fused algorithm.
  int64_t epilogue_fallbacks() const { return gemm_.epilogue_fallbacks(); }

 private:
  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options);
  Status Initialize();
  template <typename T>
  Result<T*> Alloc(int64_t count);
  // The step's kernels and GEMMs on the compute stream (eager, or under capture).
  Status EnqueueOps(int slot, int ticket, bool first, bool last, bool update, int n);
  Status EnqueueForward(int slot, int n, cuda::StepScalars* scalars);
  Status EnqueueBackward(int slot, int n);
  Status Gemm(const GemmArgs& args) { return gemm_.Run(args, compute_.get()); }

  const float* P(int tensor) const { return params_ + layout_.tensors()[tensor].offset; }
  const cuda::bf16* Pb(int tensor) const { return params_bf16_ + layout_.tensors()[tensor].offset; }
  float* G(int tensor) const { return grads_ + layout_.tensors()[tensor].offset; }

  const ModelConfig config_;
  const ParameterLayout layout_;
  const CudaBackendOptions options_;
  const cuda::AdamHyper hyper_;

  CudaStream compute_, copy_;
  CublasLtGemm gemm_;
  std::vector<DeviceBuffer> buffers_;  // owns every device array below

  // Staging: per slot, pinned host images/labels, device images/labels, and the batch size.
  PinnedBuffer pinned_images_[kSlots], pinned_labels_[kSlots];
  uint8_t* images_[kSlots] = {};
  int32_t* labels_[kSlots] = {};
  int batch_[kSlots] = {};
  CudaEvent copied_[kSlots], consumed_[kSlots];
  int next_slot_ = 0;

  // Per ticket (step parity): host inputs, results, and the step's timing events.
  PinnedBuffer pinned_inputs_[kSlots], pinned_results_[kSlots];
  CudaEvent begin_[kSlots], end_[kSlots];
  int64_t steps_enqueued_ = 0;
  bool in_step_ = false;

  // A step shape runs eagerly the first time it is seen (module loading, cuBLASLt's first-use
  // work happen outside any capture), is captured the second time, and replayed after that.
  using GraphKey = std::tuple<int, int, bool, bool, bool, int>;
  std::map<GraphKey, CudaGraph> graphs_;
  std::set<GraphKey> seen_;
  std::string graph_error_;

  // Parameters, optimizer state, scalars.
  float* params_ = nullptr;
  cuda::bf16* params_bf16_ = nullptr;
  float *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  cuda::AdamChunk* chunks_ = nullptr;
  int num_chunks_ = 0;
  double* norm_partials_ = nullptr;
  cuda::StepScalars *scalars_ = nullptr, *eval_scalars_ = nullptr;
  cuda::StepInputs* inputs_ = nullptr;
  PinnedBuffer pinned_eval_;

  // Activations for max_batch (rows = n·T).
  cuda::bf16* x0_ = nullptr;
  std::vector<float*> h_;                  // depth+1 residual streams, rows × D, fp32
  std::vector<cuda::bf16*> ln_;            // per block, rows × D
  std::vector<float*> ln_mean_, ln_rstd_;  // per block, rows
  std::vector<cuda::bf16*> pre_, act_;     // per block, rows × 4D
  float *pooled_ = nullptr, *pooled_mean_ = nullptr, *pooled_rstd_ = nullptr;
  cuda::bf16* features_ = nullptr;
  float* logits_ = nullptr;
  cuda::bf16* dlogits_ = nullptr;
  float* row_loss_ = nullptr;
  int* row_correct_ = nullptr;
  float *dfeatures_ = nullptr, *dpooled_ = nullptr, *dh_ = nullptr, *dln_ = nullptr;
  cuda::bf16 *dh_bf16_ = nullptr, *dact_ = nullptr;
};

}  // namespace sluice::trainer

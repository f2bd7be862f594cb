// The trainer's GPU backend: the model of trainer/model.h, the maths of trainer/cpu_backend.h
// (checked against it by tests/trainer/cuda_backend_test.cc, within the precision's tolerance),
// GEMMs on cuBLASLt in bf16, fp16 or fp32 (CudaBackendOptions::precision) with fp32 accumulation,
// and the optimizer on the device: fp32 master weights, Adam moments and gradients stay there;
// the host sees parameters only through Get/Set (checkpoints). fp16 runs with dynamic loss
// scaling (trainer/loss_scale.h), the scale living on the device and updated by the step itself.
//
// A step is: for each of K micro-batches, Stage (pinned copy + H2D on the copy stream) then
// Enqueue (forward + backward, gradients accumulated); the last Enqueue also runs the gradient
// norm, the non-finite guard, clipping and AdamW, and returns a ticket for Wait. Each distinct
// (slot, ticket, first, last, update, batch size) sequence is captured once into a CUDA Graph and
// replayed (CudaBackendOptions::use_graph); otherwise its kernels are launched one by one.
//
// Two batches in flight: while the device runs step i from slot s, the host may Stage and
// Enqueue step i+1 into slot 1-s (its copy then overlaps step i's compute). Stage blocks until
// that slot's previous copy has finished; the copy itself waits, on the device, until the slot's
// previous batch has been consumed, so with 3 or more micro-batches a step the host also waits
// for compute two micro-batches back. Images in page-locked memory (the client's buffers from
// PinnedAllocator) are copied to the device straight from where they are; others go through a
// pinned staging buffer first.
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
#include "trainer/backend.h"
#include "trainer/cpu_backend.h"
#include "trainer/cuda_gemm.h"
#include "trainer/cuda_kernels.h"
#include "trainer/cuda_util.h"
#include "trainer/loss_scale.h"
#include "trainer/model.h"
#include "trainer/precision.h"

namespace sluice::trainer {

struct CudaBackendOptions {
  int max_batch = 32;  // the largest micro-batch Stage accepts (sizes the activation buffers)
  Precision precision = Precision::kBf16;  // of the GEMMs' inputs (trainer/precision.h)
  LossScaleOptions loss_scale;             // fp16 only
  AdamWOptions adamw;
  bool use_graph = true;        // capture each step shape once and replay it
  bool fused_epilogues = true;  // fc1 bias+GELU in the GEMM's epilogue; false: separate kernel
  int device = 0;
};

// What Wait returns: the outcome every backend reports (trainer/backend.h).
using CudaStepOutcome = StepOutcome;

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
  // before averaging and clipping, and multiplied by the loss scale the step ran with.
  Status GetGradients(std::vector<float>* grads);
  // The dynamic loss scale (fp16): Set restores a checkpoint's; each Wait also returns it as the
  // step left it (CudaStepOutcome::next_loss_scale). SetParameters resets it to
  // loss_scale.initial (1 in other precisions). InvalidArgument for a scale that is not positive
  // and finite, or not 1 outside fp16.
  Status SetLossScale(const LossScaleState& state);
  Result<LossScaleState> GetLossScale();

  // Starts a batch's H2D on the copy stream into the next device slot; returns the slot.
  // Page-locked `images` are read in place: keep them unchanged until Wait for the step that
  // consumes the slot has returned. Others are first copied into the slot's pinned buffer.
  // REQUIRES: 1 <= labels.size() <= max_batch, images sized to match.
  Result<int> Stage(std::span<const uint8_t> images, std::span<const int32_t> labels);
  // Enqueues forward + backward of staged `slot`. first: zero the step's gradients and sums.
  // last: with `update`, run clipping + AdamW at learning rate `lr` over `step_samples`
  // samples; returns the ticket to Wait on (-1 when !last).
  Result<int> Enqueue(int slot, bool first, bool last, bool update, float lr, int step_samples);
  // Waits for the step of `ticket`. Call it before enqueuing the step after next.
  Result<CudaStepOutcome> Wait(int ticket);
  // The gap before the next step (an evaluation, a checkpoint) is not waiting for data: that
  // step reports no idle time.
  void ExcludeGapFromDataWait() { exclude_gap_ = true; }

  // One micro-batch step, synchronously (tests): Stage, Enqueue(first, last), Wait.
  Result<CudaStepOutcome> Step(std::span<const uint8_t> images, std::span<const int32_t> labels,
                               float lr, bool update);
  // Waits for everything enqueued on both streams (copies included): after it, no staged batch
  // is read any more. For error paths that drop batches before their step's Wait.
  void Synchronize();

  // The forward pass alone (evaluation), synchronously.
  Result<StepResult> Forward(std::span<const uint8_t> images, std::span<const int32_t> labels);

  // Why the last failed graph capture failed; empty while every capture has worked. A failed
  // capture's step runs eagerly and the shape is captured again when it next comes; after
  // kMaxCaptureFailures failures graphs are given up and every step launches eagerly.
  static constexpr int kMaxCaptureFailures = 3;
  const std::string& graph_error() const { return graph_error_; }
  bool graphs_given_up() const { return capture_failures_ >= kMaxCaptureFailures; }
  // Micro-batches replayed from a graph, and launched eagerly (first sightings, failed captures).
  int64_t graph_launches() const { return graph_launches_; }
  int64_t eager_launches() const { return eager_launches_; }
  // GEMMs whose bias (+GELU) ran as a separate kernel because cuBLASLt had no fused algorithm.
  int64_t epilogue_fallbacks() const { return gemm_.epilogue_fallbacks(); }
  // Batches' host→device copies so far, timed on the copy stream by events: bytes per second
  // (0 before the first copy has been measured), and how many were read in place from
  // page-locked memory versus through the staging buffer.
  double h2d_bytes_per_sec() const;
  int64_t staged_in_place() const { return staged_in_place_; }
  int64_t staged_via_copy() const { return staged_via_copy_; }

 private:
  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options);
  Status Initialize();
  // The activations and their gradients, for max_batch samples (part of Initialize).
  Status AllocateActivations();
  template <typename T>
  Result<T*> Alloc(int64_t count);
  // The step's kernels and GEMMs on the compute stream (eager, or under capture).
  Status EnqueueOps(int slot, int ticket, bool first, bool last, bool update, int n);
  Status EnqueueForward(int slot, int n, cuda::StepScalars* scalars);
  Status EnqueueBackward(int n);
  // Resizes *to to the parameter count and enqueues the copy of `from` (device, fp32) into it on
  // the compute stream; the caller synchronizes.
  Status EnqueueCopyToHost(const float* from, std::vector<float>* to);
  // What SetParameters starts from: options.loss_scale.initial in fp16, else 1.
  LossScaleState InitialLossScale() const {
    return {options_.precision == Precision::kFp16 ? options_.loss_scale.initial : 1.0f, 0};
  }
  Status Gemm(GemmArgs args) {
    args.type = options_.precision;
    return gemm_.Run(args, compute_.get());
  }
  // count values in the precision.
  Result<void*> AllocNarrow(int64_t count);
  // count elements of element_size bytes (at least one), owned by buffers_.
  Result<void*> AllocBytes(size_t element_size, int64_t count);
  // Adds the time and bytes of slot's last H2D, if not yet counted. REQUIRES: it has completed.
  Status CountCopy(int slot);

  const float* P(int tensor) const { return params_ + layout_.tensors()[tensor].offset; }
  // The narrow copy of a parameter tensor (what the GEMMs read).
  const void* Pn(int tensor) const {
    return static_cast<const char*>(params_narrow_) +
           layout_.tensors()[tensor].offset * ElementSize(options_.precision);
  }
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
  CudaEvent copy_begin_[kSlots], copied_[kSlots], consumed_[kSlots];  // copy events: timed
  int64_t copy_bytes_[kSlots] = {};  // of the slot's last H2D not yet counted; 0 when counted
  int next_slot_ = 0;
  double h2d_seconds_ = 0, h2d_bytes_ = 0;
  int64_t staged_in_place_ = 0, staged_via_copy_ = 0;

  // Per ticket (step parity): host inputs, results, the step's start event and number, and
  // whether its idle time counts. Step ends are a ring of kSlots + 1 indexed by step number:
  // Wait(i) reads step i-1's end while step i+1, already enqueued, records its own.
  static constexpr int kEnds = kSlots + 1;
  PinnedBuffer pinned_inputs_[kSlots], pinned_results_[kSlots];
  CudaEvent begin_[kSlots], ends_[kEnds];
  int64_t ticket_step_[kSlots] = {};
  bool measure_idle_[kSlots] = {};
  bool exclude_gap_ = false;
  int64_t steps_enqueued_ = 0;
  bool in_step_ = false;

  // A step shape runs eagerly the first time it is seen (module loading, cuBLASLt's first-use
  // work happen outside any capture), is captured the second time, and replayed after that.
  using GraphKey = std::tuple<int, int, bool, bool, bool, int>;
  std::map<GraphKey, CudaGraph> graphs_;
  std::set<GraphKey> seen_;
  std::string graph_error_;
  int capture_failures_ = 0;
  int64_t graph_launches_ = 0, eager_launches_ = 0;

  // Parameters, optimizer state, scalars.
  float* params_ = nullptr;
  void* params_narrow_ = nullptr;
  float *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  cuda::AdamChunk* chunks_ = nullptr;
  int num_chunks_ = 0;
  double* norm_partials_ = nullptr;
  float* reduction_scratch_ = nullptr;  // BiasGrad's and LayerNormBackward's, compute stream only
  cuda::StepScalars *scalars_ = nullptr, *eval_scalars_ = nullptr;
  cuda::StepInputs* inputs_ = nullptr;
  PinnedBuffer pinned_eval_;

  // Activations for max_batch (rows = n·T); void*: narrow (the precision), float*: fp32.
  void* x0_ = nullptr;
  std::vector<float*> h_;                  // depth+1 residual streams, rows × D
  std::vector<void*> ln_;                  // per block, rows × D
  std::vector<float*> ln_mean_, ln_rstd_;  // per block, rows
  std::vector<void*> pre_, act_;           // per block, rows × 4D
  float *pooled_ = nullptr, *pooled_mean_ = nullptr, *pooled_rstd_ = nullptr;
  void* features_ = nullptr;
  float* logits_ = nullptr;
  void* dlogits_ = nullptr;
  float* row_loss_ = nullptr;
  int* row_correct_ = nullptr;
  float *dfeatures_ = nullptr, *dpooled_ = nullptr, *dh_ = nullptr, *dln_ = nullptr;
  void *dh_narrow_ = nullptr, *dact_ = nullptr;
};

}  // namespace sluice::trainer

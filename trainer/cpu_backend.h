// The trainer's CPU backend: the model's forward and backward passes in fp32, parallel with oneTBB
// (trainer/cpu_kernels.h). The reference the GPU backend will be checked against.
//
// Thread-safety: one CpuBackend per training loop; its calls must not overlap (they share the
// activation workspace). Kernels inside a call run on TBB's pool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainer/model.h"

namespace sluice::trainer {

struct StepResult {
  double loss_sum = 0;  // Σ over the batch of per-sample cross-entropy (nats)
  int64_t correct = 0;  // samples whose argmax logit is the label
};

class CpuBackend {
 public:
  explicit CpuBackend(const ModelConfig& config);
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }

  // images: labels.size() × S × S × 3 uint8 (NHWC). Adds ∂(Σ loss)/∂params to `grads` (the
  // gradient of the SUM over samples, so micro-batches of any size accumulate exactly; the caller
  // divides by the number of samples).
  // REQUIRES: params.size() == grads.size() == layout().total(); 0 <= labels[i] < classes.
  StepResult ForwardBackward(std::span<const float> params, std::span<const uint8_t> images,
                             std::span<const int32_t> labels, std::span<float> grads);
  // The forward pass alone (evaluation).
  StepResult Forward(std::span<const float> params, std::span<const uint8_t> images,
                     std::span<const int32_t> labels);

 private:
  // Runs the forward pass for n samples, keeping the activations the backward pass needs.
  StepResult RunForward(const float* params, const uint8_t* images,
                        std::span<const int32_t> labels);
  void Resize(int n);
  const float* P(const float* params, int tensor) const {
    return params + layout_.tensors()[tensor].offset;
  }

  const ModelConfig config_;
  const ParameterLayout layout_;
  const InputNormalization norm_;

  // Activation workspace for the current batch size (rows = n·T token rows).
  int n_ = 0;
  std::vector<float> x0_;                              // rows × patch_dim
  std::vector<std::vector<float>> h_;                  // depth+1 residual streams, rows × D
  std::vector<std::vector<float>> ln_;                 // per block: LN output, rows × D
  std::vector<std::vector<float>> ln_mean_, ln_rstd_;  // per block: rows
  std::vector<std::vector<float>> pre_;  // per block: fc1 output before GELU, rows × 4D
  std::vector<std::vector<float>> act_;  // per block: GELU output, rows × 4D
  std::vector<float> pooled_, pooled_mean_, pooled_rstd_, features_, logits_, dlogits_;
  std::vector<float> dfeatures_, dpooled_, dh_, dln_, dhidden_, scratch_;
};

}  // namespace sluice::trainer

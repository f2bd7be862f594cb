// The trainer's CPU backend: the model's forward and backward passes, parallel with oneTBB
// (trainer/cpu_kernels.h). The reference the GPU backend is checked against.
//
// Precision (trainer/precision.h): kFp32 computes everything in fp32. kBf16 and kFp16 emulate the
// CUDA backend's storage: the tensors it keeps in the narrow format (GEMM weights and fc1's bias,
// the patches, LayerNorm outputs, fc1's pre-activation and GELU output, the features, and the
// activation gradients fed to GEMMs) are rounded to it where the GPU writes them; arithmetic
// stays fp32. That is slower than kFp32 and exists to test the narrow formats' behaviour (fp16
// overflow and loss scaling) without a GPU.
//
// Thread-safety: one CpuBackend per training loop; its calls must not overlap (they share the
// activation workspace). Kernels inside a call run on TBB's pool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainer/backend.h"
#include "trainer/model.h"
#include "trainer/precision.h"

namespace sluice::trainer {

class CpuBackend {
 public:
  explicit CpuBackend(const ModelConfig& config, Precision precision = Precision::kFp32);
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  Precision precision() const { return precision_; }

  // images: labels.size() × S × S × 3 uint8 (NHWC). Adds ∂(Σ loss)/∂params to `grads` (the
  // gradient of the SUM over samples, so micro-batches of any size accumulate exactly; the caller
  // divides by the number of samples). The backward pass starts from loss_scale · ∂loss/∂logits,
  // so the gradients come out multiplied by loss_scale (trainer/loss_scale.h).
  // REQUIRES: params.size() == grads.size() == layout().total(); 0 <= labels[i] < classes.
  StepResult ForwardBackward(std::span<const float> params, std::span<const uint8_t> images,
                             std::span<const int32_t> labels, std::span<float> grads,
                             float loss_scale = 1.0f);
  // The forward pass alone (evaluation).
  StepResult Forward(std::span<const float> params, std::span<const uint8_t> images,
                     std::span<const int32_t> labels);

 private:
  // Runs the forward pass for n samples, keeping the activations the backward pass needs.
  // `params` are the ones the GEMMs read (RoundedParameters' in a narrow precision).
  StepResult RunForward(const float* params, const uint8_t* images,
                        std::span<const int32_t> labels);
  // The parameters as the GEMMs see them: `params` itself in kFp32, else a copy in which the
  // GEMM weights and fc1's bias are rounded to the precision.
  const float* RoundedParameters(std::span<const float> params);
  void Round(std::vector<float>& v) {
    RoundInPlace(v.data(), static_cast<int64_t>(v.size()), precision_);
  }
  void Resize(int n);
  const float* P(const float* params, int tensor) const {
    return params + layout_.tensors()[tensor].offset;
  }

  const ModelConfig config_;
  const ParameterLayout layout_;
  const InputNormalization norm_;
  const Precision precision_;
  std::vector<float> rounded_params_;

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
  std::vector<float> dh_rounded_;  // dh_ in the precision (the GEMMs' copy); unused in kFp32
};

}  // namespace sluice::trainer

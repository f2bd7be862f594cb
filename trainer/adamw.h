// AdamW (decoupled weight decay, Loshchilov & Hutter) on fp32 weights held in one flat array,
// with the global-gradient-norm clipping and the non-finite guard that run before it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainer/model.h"

namespace sluice::trainer {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.05f;  // applied to tensors with weight_decay set (linear weights) only
  float clip_norm = 1.0f;      // global L2 norm of the gradient; 0 = no clipping
};

// √Σ g², accumulated in double in a fixed order; +inf or NaN when any gradient is not finite.
double GlobalNorm(std::span<const float> grads);

class AdamW {
 public:
  AdamW(const ParameterLayout& layout, const AdamWOptions& options);

  // Clips `grads` in place to options.clip_norm (given their norm) and applies one update with
  // learning rate `lr`. REQUIRES: grad_norm is finite (the caller skips the step otherwise).
  void Update(std::span<float> params, std::span<float> grads, double grad_norm, float lr);

  // Adam's moments and its count of applied updates (bias correction); checkpointed.
  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }

 private:
  const ParameterLayout& layout_;
  const AdamWOptions options_;
  std::vector<float> m_, v_;
  int64_t updates_ = 0;
};

}  // namespace sluice::trainer

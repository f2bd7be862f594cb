#include "trainer/cpu_backend.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include "trainer/cpu_kernels.h"

namespace sluice::trainer {

CpuBackend::CpuBackend(const ModelConfig& config, Precision precision)
    : config_(config), layout_(config), precision_(precision) {}

const float* CpuBackend::RoundedParameters(std::span<const float> params) {
  if (precision_ == Precision::kFp32) return params.data();
  rounded_params_.assign(params.begin(), params.end());
  std::vector<int> narrow = {layout_.embed_weight, layout_.head_weight};
  for (const ParameterLayout::Block& b : layout_.blocks) {
    narrow.insert(narrow.end(), {b.fc1_weight, b.fc1_bias, b.fc2_weight});
  }
  for (int tensor : narrow) {
    const ParameterTensor& t = layout_.tensors()[tensor];
    RoundInPlace(rounded_params_.data() + t.offset, t.size, precision_);
  }
  return rounded_params_.data();
}

void CpuBackend::Resize(int n) {
  if (n == n_) return;
  n_ = n;
  const int64_t rows = int64_t{n} * config_.tokens();
  const int64_t d = config_.width, f = config_.hidden();
  x0_.resize(rows * config_.patch_dim());
  h_.assign(config_.depth + 1, std::vector<float>(rows * d));
  ln_.assign(config_.depth, std::vector<float>(rows * d));
  ln_mean_.assign(config_.depth, std::vector<float>(rows));
  ln_rstd_.assign(config_.depth, std::vector<float>(rows));
  pre_.assign(config_.depth, std::vector<float>(rows * f));
  act_.assign(config_.depth, std::vector<float>(rows * f));
  pooled_.resize(n * d);
  pooled_mean_.resize(n);
  pooled_rstd_.resize(n);
  features_.resize(n * d);
  logits_.resize(int64_t{n} * config_.classes);
  dlogits_.resize(logits_.size());
  dfeatures_.resize(n * d);
  dpooled_.resize(n * d);
  dh_.resize(rows * d);
  if (precision_ != Precision::kFp32) dh_rounded_.resize(rows * d);
  dln_.resize(rows * d);
  dhidden_.resize(rows * f);
  // GemmNT's transposed weight, k × n: every forward GEMM takes or gives width D.
  scratch_.resize(d * std::max<int64_t>({config_.patch_dim(), f, config_.classes}));
}

StepResult CpuBackend::RunForward(const float* params, const uint8_t* images,
                                  std::span<const int32_t> labels) {
  const int n = static_cast<int>(labels.size());
  Resize(n);
  const int s = config_.image_size, p = config_.patch, grid = s / p, t = config_.tokens();
  const int rows = n * t, d = config_.width, f = config_.hidden(), pd = config_.patch_dim();

  // Normalize and patchify: token (gy, gx) of image i is row i·T + gy·grid + gx; its columns are
  // (py, px, channel) in image order.
  tbb::parallel_for(tbb::blocked_range<int>(0, rows), [&](const tbb::blocked_range<int>& r) {
    for (int row = r.begin(); row != r.end(); ++row) {
      const int i = row / t, gy = (row % t) / grid, gx = row % grid;
      float* out = x0_.data() + int64_t{row} * pd;
      for (int py = 0; py < p; ++py) {
        const uint8_t* src = images + ((int64_t{i} * s + gy * p + py) * s + gx * p) * 3;
        for (int q = 0; q < p * 3; ++q) *out++ = norm_.table[q % 3][src[q]];
      }
    }
  });
  Round(x0_);

  GemmNT(x0_.data(), P(params, layout_.embed_weight), h_[0].data(), rows, d, pd, false,
         scratch_.data());
  AddBias(h_[0].data(), P(params, layout_.embed_bias), rows, d);
  for (int l = 0; l < config_.depth; ++l) {
    const ParameterLayout::Block& b = layout_.blocks[l];
    LayerNormForward(h_[l].data(), P(params, b.ln_gain), P(params, b.ln_bias), ln_[l].data(),
                     ln_mean_[l].data(), ln_rstd_[l].data(), rows, d);
    Round(ln_[l]);
    GemmNT(ln_[l].data(), P(params, b.fc1_weight), pre_[l].data(), rows, f, d, false,
           scratch_.data());
    AddBias(pre_[l].data(), P(params, b.fc1_bias), rows, f);
    // As cuBLASLt's GELU_AUX_BIAS epilogue: GELU of the fp32 sum; the narrow copy of that sum is
    // what the backward pass reads.
    GeluForward(pre_[l].data(), act_[l].data(), int64_t{rows} * f);
    Round(pre_[l]);
    Round(act_[l]);
    std::memcpy(h_[l + 1].data(), h_[l].data(), sizeof(float) * rows * d);
    GemmNT(act_[l].data(), P(params, b.fc2_weight), h_[l + 1].data(), rows, d, f, true,
           scratch_.data());
    AddBias(h_[l + 1].data(), P(params, b.fc2_bias), rows, d);
  }

  // Mean over each image's tokens (fixed order: deterministic).
  const float* last = h_[config_.depth].data();
  tbb::parallel_for(tbb::blocked_range<int>(0, n), [&](const tbb::blocked_range<int>& r) {
    for (int i = r.begin(); i != r.end(); ++i) {
      float* out = pooled_.data() + int64_t{i} * d;
      std::fill(out, out + d, 0.0f);
      for (int k = 0; k < t; ++k) {
        const float* src = last + (int64_t{i} * t + k) * d;
        for (int j = 0; j < d; ++j) out[j] += src[j];
      }
      for (int j = 0; j < d; ++j) out[j] /= static_cast<float>(t);
    }
  });
  LayerNormForward(pooled_.data(), P(params, layout_.final_ln_gain),
                   P(params, layout_.final_ln_bias), features_.data(), pooled_mean_.data(),
                   pooled_rstd_.data(), n, d);
  Round(features_);
  GemmNT(features_.data(), P(params, layout_.head_weight), logits_.data(), n, config_.classes, d,
         false, scratch_.data());
  AddBias(logits_.data(), P(params, layout_.head_bias), n, config_.classes);

  StepResult result;
  result.loss_sum = SoftmaxCrossEntropy(logits_.data(), labels, config_.classes, dlogits_.data(),
                                        &result.correct);
  return result;
}

StepResult CpuBackend::Forward(std::span<const float> params, std::span<const uint8_t> images,
                               std::span<const int32_t> labels) {
  return RunForward(RoundedParameters(params), images.data(), labels);
}

StepResult CpuBackend::ForwardBackward(std::span<const float> params_span,
                                       std::span<const uint8_t> images,
                                       std::span<const int32_t> labels,
                                       std::span<float> grads_span, float loss_scale) {
  const float* params = RoundedParameters(params_span);
  float* grads = grads_span.data();
  auto G = [&](int tensor) { return grads + layout_.tensors()[tensor].offset; };
  const StepResult result = RunForward(params, images.data(), labels);
  const int n = static_cast<int>(labels.size());
  const int t = config_.tokens(), rows = n * t, d = config_.width, f = config_.hidden();
  const int c = config_.classes;
  if (loss_scale != 1.0f) {
    for (float& g : dlogits_) g *= loss_scale;
  }
  Round(dlogits_);
  // The residual-stream gradient as the GEMMs read it.
  const std::vector<float>& dh_in = precision_ == Precision::kFp32 ? dh_ : dh_rounded_;
  auto round_dh = [&] {
    if (precision_ == Precision::kFp32) return;
    dh_rounded_ = dh_;
    Round(dh_rounded_);
  };

  // Head and final LayerNorm.
  GemmTN(dlogits_.data(), features_.data(), G(layout_.head_weight), c, d, n, true);
  BiasGrad(dlogits_.data(), G(layout_.head_bias), n, c);
  GemmNN(dlogits_.data(), P(params, layout_.head_weight), dfeatures_.data(), n, d, c, false);
  LayerNormBackward(pooled_.data(), dfeatures_.data(), P(params, layout_.final_ln_gain),
                    pooled_mean_.data(), pooled_rstd_.data(), dpooled_.data(),
                    G(layout_.final_ln_gain), G(layout_.final_ln_bias), n, d, false);
  // Mean pool: every token of image i gets dpooled[i] / T.
  tbb::parallel_for(tbb::blocked_range<int>(0, rows), [&](const tbb::blocked_range<int>& r) {
    for (int row = r.begin(); row != r.end(); ++row) {
      const float* src = dpooled_.data() + int64_t{row / t} * d;
      float* out = dh_.data() + int64_t{row} * d;
      for (int j = 0; j < d; ++j) out[j] = src[j] / static_cast<float>(t);
    }
  });
  round_dh();

  for (int l = config_.depth - 1; l >= 0; --l) {
    const ParameterLayout::Block& b = layout_.blocks[l];
    // h[l+1] = h[l] + fc2(GELU(fc1(LN(h[l])))): dh flows through unchanged and into the branch.
    GemmTN(dh_in.data(), act_[l].data(), G(b.fc2_weight), d, f, rows, true);
    BiasGrad(dh_in.data(), G(b.fc2_bias), rows, d);
    GemmNN(dh_in.data(), P(params, b.fc2_weight), dhidden_.data(), rows, f, d, false);
    Round(dhidden_);
    GeluBackward(pre_[l].data(), dhidden_.data(), dhidden_.data(), int64_t{rows} * f);
    Round(dhidden_);
    GemmTN(dhidden_.data(), ln_[l].data(), G(b.fc1_weight), f, d, rows, true);
    BiasGrad(dhidden_.data(), G(b.fc1_bias), rows, f);
    GemmNN(dhidden_.data(), P(params, b.fc1_weight), dln_.data(), rows, d, f, false);
    LayerNormBackward(h_[l].data(), dln_.data(), P(params, b.ln_gain), ln_mean_[l].data(),
                      ln_rstd_[l].data(), dh_.data(), G(b.ln_gain), G(b.ln_bias), rows, d, true);
    round_dh();
  }
  GemmTN(dh_in.data(), x0_.data(), G(layout_.embed_weight), d, config_.patch_dim(), rows, true);
  BiasGrad(dh_in.data(), G(layout_.embed_bias), rows, d);
  return result;
}

}  // namespace sluice::trainer

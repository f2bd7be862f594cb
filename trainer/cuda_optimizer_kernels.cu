// The trainer's optimizer kernels (trainer/cuda_kernels.h): the gradient norm, the step's
// non-finite guard, loss scale and clipping, multi-tensor AdamW, and casts to the narrow format.
#include <algorithm>

#include "trainer/adamw_step.h"
#include "trainer/cuda_kernel_support.cuh"
#include "trainer/cuda_kernels.h"

namespace sluice::trainer::cuda {
namespace {

constexpr int kGradNormBlocks = 1024;

__global__ void SquareSumKernel(const float* __restrict__ g, int64_t count,
                                double* __restrict__ partials) {
  __shared__ double s[32];
  double sum = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    sum += double(g[i]) * g[i];
  }
  sum = WarpSum(sum);
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) sum += s[w];
    partials[blockIdx.x] = sum;
  }
}

__global__ void PrepareUpdateKernel(const double* __restrict__ partials, int blocks,
                                    const StepInputs* inputs, AdamHyper hyper, bool dynamic_scale,
                                    LossScaleOptions scale_options, StepScalars* scalars) {
  if (threadIdx.x != 0) return;
  double sum = 0;
  for (int b = 0; b < blocks; ++b) sum += partials[b];
  // The gradients carry the loss scale: divide it out with the averaging.
  const double loss_scale = scalars->loss_scale.scale;
  const double inv = inputs->inv_samples / loss_scale;
  const double norm = sqrt(sum) * inv;  // ‖Σg / samples‖
  scalars->grad_norm = norm;
  scalars->step_loss_scale = scalars->loss_scale.scale;
  if (dynamic_scale) UpdateLossScale(&scalars->loss_scale, isfinite(norm), scale_options);
  const bool finite = isfinite(norm) && isfinite(scalars->loss_sum);
  scalars->skipped = finite ? 0 : 1;
  if (!finite) return;
  const double clip = hyper.clip_norm > 0 && norm > hyper.clip_norm ? hyper.clip_norm / norm : 1.0;
  scalars->grad_scale = static_cast<float>(inv * clip);
  scalars->updates += 1;
  const double t = static_cast<double>(scalars->updates);
  scalars->correction1 = static_cast<float>(1.0 - pow(double(hyper.beta1), t));
  scalars->correction2 = static_cast<float>(1.0 - pow(double(hyper.beta2), t));
}

template <typename T>
__global__ void AdamWKernel(const AdamChunk* __restrict__ chunks, float* __restrict__ params,
                            T* __restrict__ params_narrow, const float* __restrict__ grads,
                            float* __restrict__ m, float* __restrict__ v,
                            const StepInputs* __restrict__ inputs, AdamHyper hyper,
                            const StepScalars* __restrict__ scalars) {
  if (scalars->skipped) return;
  const AdamChunk chunk = chunks[blockIdx.x];
  const float lr = inputs->lr, scale = scalars->grad_scale;
  const float c1 = scalars->correction1, c2 = scalars->correction2;
  const float decay = chunk.decay ? lr * hyper.weight_decay : 0.0f;
  const float b1 = hyper.beta1, b2 = hyper.beta2;
  for (int k = threadIdx.x; k < chunk.size; k += blockDim.x) {
    const int64_t i = chunk.begin + k;
    float p = params[i], mi = m[i], vi = v[i];
    AdamWStep(grads[i] * scale, lr, decay, b1, b2, c1, c2, hyper.epsilon, p, mi, vi);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
    params_narrow[i] = FromFloat<T>(p);
  }
}

template <typename T>
__global__ void CastKernel(const float* __restrict__ src, T* __restrict__ dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = FromFloat<T>(src[i]);
  }
}

}  // namespace

int GradNormBlocks() { return kGradNormBlocks; }

void GradNormAndPrepare(const float* grads, int64_t count, double* partials,
                        const StepInputs* inputs, const AdamHyper& hyper, bool dynamic_scale,
                        const LossScaleOptions& scale_options, StepScalars* scalars,
                        cudaStream_t stream) {
  // At most one block per 256 gradients: a small model sums fewer partials.
  const int blocks = std::max(1, std::min(kGradNormBlocks, Blocks(count, 256)));
  Launch(SquareSumKernel, blocks, 256, 0, stream, grads, count, partials);
  Launch(PrepareUpdateKernel, 1, 32, 0, stream, partials, blocks, inputs, hyper, dynamic_scale,
         scale_options, scalars);
}

void AdamWUpdate(const AdamChunk* chunks, int num_chunks, float* params, void* params_narrow,
                 Precision p, const float* grads, float* m, float* v, const StepInputs* inputs,
                 const AdamHyper& hyper, const StepScalars* scalars, cudaStream_t stream) {
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(AdamWKernel<T>, num_chunks, 256, 0, stream, chunks, params,
           static_cast<T*>(params_narrow), grads, m, v, inputs, hyper, scalars);
  });
}

void CastToNarrow(const float* src, void* dst, Precision p, int64_t count, cudaStream_t stream) {
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(CastKernel<T>, Blocks(count, 256), 256, 0, stream, src, static_cast<T*>(dst), count);
  });
}

}  // namespace sluice::trainer::cuda

// CUDA kernels of the trainer's GPU backend (trainer/cuda_backend.h). Each function only enqueues
// work on `stream` (graph-capturable: no allocation, no synchronization) over caller-owned device
// arrays; row-major layouts as in trainer/cpu_kernels.h. Launch errors surface at the next
// synchronizing call, or from LastLaunchError().
//
// Precision: activations handed to GEMMs are bf16; the residual stream, LayerNorm statistics,
// logits, gradients and optimizer state are fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/status.h"

namespace sluice::trainer::cuda {

using bf16 = __nv_bfloat16;

// Accumulators of one optimizer step, on the device. Zeroed by the first micro-batch.
struct StepScalars {
  double loss_sum;    // Σ per-sample cross-entropy over the step's micro-batches
  long long correct;  // argmax hits
  double grad_norm;   // of the averaged gradient (before clipping); NaN/Inf when not finite
  float grad_scale;   // 1/samples × clip factor, applied by AdamW
  float correction1, correction2;  // Adam bias corrections 1 - β^t
  int skipped;                     // 1: loss or gradient not finite, the update was not applied
  long long updates;               // Adam's count of applied updates (t)
};

// Written by the host before each step (pinned memory, copied in by the step itself).
struct StepInputs {
  float lr;
  float inv_samples;  // 1 / samples in the step
};

// One contiguous run of the flat parameter array with a single weight-decay setting; AdamW walks
// a table of these (multi-tensor apply). size <= kAdamChunk.
struct AdamChunk {
  long long begin;
  int size;
  int decay;
};
constexpr int kAdamChunk = 4096;

struct AdamHyper {
  float beta1, beta2, epsilon, weight_decay, clip_norm;
};

// The error of the last launch, as a Status (cudaGetLastError).
Status LastLaunchError(const char* what);

// uint8 NHWC images [n×S×S×3] → x0 [n·T × P·P·3] bf16, (v/255 - mean)/std per channel, patches in
// image order, columns (py, px, channel) — the CPU backend's layout.
void NormalizePatchify(const uint8_t* images, bf16* x0, int n, int image_size, int patch,
                       cudaStream_t stream);

// y = LN(x)·gamma + beta (eps 1e-5), x fp32 [rows×d], y bf16; mean and rstd per row.
void LayerNormForward(const float* x, const float* gamma, const float* beta, bf16* y, float* mean,
                      float* rstd, int rows, int d, cudaStream_t stream);
// dx (+)= ∂L/∂x (fp32; and its bf16 copy in dx_bf16 when not null); dgamma, dbeta accumulated.
// REQUIRES: LayerNormBackwardSetup(d) once before capture when d > 4096.
void LayerNormBackward(const float* x, const float* dy, const float* gamma, const float* mean,
                       const float* rstd, float* dx, bf16* dx_bf16, float* dgamma, float* dbeta,
                       int rows, int d, bool accumulate_dx, cudaStream_t stream);
Status LayerNormBackwardSetup(int d);

// GELU, tanh form (the one cuBLASLt's GELU epilogues use, so both paths agree):
// y = GELU(x + bias[col]); pre (optional) keeps x + bias. x and y may alias.
void GeluBiasForward(const bf16* x, const bf16* bias, bf16* pre, bf16* y, int rows, int cols,
                     cudaStream_t stream);
// dx = dy · GELU'(pre), in place allowed.
void GeluBackward(const bf16* pre, const bf16* dy, bf16* dx, int64_t count, cudaStream_t stream);

// y[row, col] += bias[col]; y and bias both fp32 (fp32 = true) or both bf16. The GEMM's fallback
// when cuBLASLt has no fused-bias algorithm for a shape or alignment.
void AddBias(void* y, const void* bias, bool fp32, int rows, int cols, cudaStream_t stream);

// db[col] += Σ_rows dy[row, col] (fp32 accumulation).
void BiasGrad(const bf16* dy, float* db, int rows, int cols, cudaStream_t stream);

// pooled[i, :] = mean over the T tokens of image i of h (fp32).
void MeanPoolForward(const float* h, float* pooled, int n, int tokens, int d, cudaStream_t stream);
// dh[i·T + t, :] = dpooled[i, :] / T, fp32 and bf16.
void MeanPoolBackward(const float* dpooled, float* dh, bf16* dh_bf16, int n, int tokens, int d,
                      cudaStream_t stream);

// One block per sample: loss, argmax, dlogits = softmax - onehot (bf16); then adds Σ loss and the
// hits to scalars->loss_sum / correct (one block, fixed order: deterministic).
// row_loss, row_correct: n scratch values.
void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int n, int classes,
                         bf16* dlogits, float* row_loss, int* row_correct, StepScalars* scalars,
                         cudaStream_t stream);

// Σ g² in per-block partials (partials holds GradNormBlocks() doubles), then one block that sums
// them in a fixed order, decides skip (loss or norm not finite), the clip factor, Adam's count and
// bias corrections.
int GradNormBlocks();
void GradNormAndPrepare(const float* grads, int64_t count, double* partials,
                        const StepInputs* inputs, const AdamHyper& hyper, StepScalars* scalars,
                        cudaStream_t stream);

// For every chunk: unless scalars->skipped, g = grad·grad_scale; Adam moments; decoupled decay
// where chunk.decay; writes the bf16 copy of the updated parameter.
void AdamWUpdate(const AdamChunk* chunks, int num_chunks, float* params, bf16* params_bf16,
                 const float* grads, float* m, float* v, const StepInputs* inputs,
                 const AdamHyper& hyper, const StepScalars* scalars, cudaStream_t stream);

// dst[i] = bf16(src[i]).
void CastToBf16(const float* src, bf16* dst, int64_t count, cudaStream_t stream);

}  // namespace sluice::trainer::cuda

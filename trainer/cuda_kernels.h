// CUDA kernels of the trainer's GPU backend (trainer/cuda_backend.h). Each function only enqueues
// work on `stream` (graph-capturable: no allocation, no synchronization) over caller-owned device
// arrays; row-major layouts as in trainer/cpu_kernels.h. Launch errors surface at the next
// synchronizing call, or from LastLaunchError().
//
// Precision (trainer/precision.h): the arrays GEMMs read — "narrow" below, typed void* — hold
// bf16, fp16 or fp32 values as the Precision argument says; the residual stream, LayerNorm
// statistics, logits, gradients and optimizer state are always fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "formats/status.h"
#include "trainer/loss_scale.h"
#include "trainer/precision.h"

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
  LossScaleState loss_scale;       // the scale the next step runs with (1 unless fp16)
  float step_loss_scale;           // the scale the last update step ran with
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

// The table for a ParameterLayout (trainer/model.h; a template because this header is C++17):
// every tensor cut into chunks of at most kAdamChunk elements.
template <typename Layout>
std::vector<AdamChunk> AdamChunks(const Layout& layout) {
  std::vector<AdamChunk> chunks;
  for (const auto& tensor : layout.tensors()) {
    for (int64_t off = 0; off < tensor.size; off += kAdamChunk) {
      chunks.push_back({tensor.offset + off,
                        static_cast<int>(std::min<int64_t>(kAdamChunk, tensor.size - off)),
                        tensor.weight_decay ? 1 : 0});
    }
  }
  return chunks;
}

struct AdamHyper {
  float beta1, beta2, epsilon, weight_decay, clip_norm;
};

// The error of the last launch, as a Status (cudaGetLastError).
Status LastLaunchError(const char* what);

// uint8 NHWC images [n×S×S×3] → x0 [n·T × P·P·3] narrow, (v/255 - mean)/std per channel, patches
// in image order, columns (py, px, channel) — the CPU backend's layout.
void NormalizePatchify(const uint8_t* images, void* x0, Precision p, int n, int image_size,
                       int patch, cudaStream_t stream);

// y = LN(x)·gamma + beta (eps 1e-5), x fp32 [rows×d], y narrow; mean and rstd per row.
void LayerNormForward(const float* x, const float* gamma, const float* beta, void* y, Precision p,
                      float* mean, float* rstd, int rows, int d, cudaStream_t stream);
// BiasGrad and LayerNormBackward sum over rows without atomics, in an order fixed by the shapes
// alone, so two runs give the same bits: per-slab partial sums into `scratch`, then the slabs
// added in order. A reduction of rows × cols needs ColumnReductionScratch(rows, cols) floats
// (monotone in both, so one buffer sized for the largest serves smaller ones); it is used in
// stream order, so launches on one stream may share it.
int64_t ColumnReductionScratch(int64_t rows, int cols);

// dx (+)= ∂L/∂x (fp32; and its narrow copy in dx_narrow when not null); dgamma, dbeta
// accumulated (fixed order, as above).
void LayerNormBackward(const float* x, const float* dy, const float* gamma, const float* mean,
                       const float* rstd, float* dx, void* dx_narrow, Precision p, float* dgamma,
                       float* dbeta, float* scratch, int rows, int d, bool accumulate_dx,
                       cudaStream_t stream);

// GELU, tanh form (the one cuBLASLt's GELU epilogues use, so both paths agree), all narrow:
// y = GELU(x + bias[col]); pre (optional) keeps x + bias. x and y may alias.
void GeluBiasForward(const void* x, const void* bias, void* pre, void* y, Precision p, int rows,
                     int cols, cudaStream_t stream);
// dx = dy · GELU'(pre), all narrow, in place allowed.
void GeluBackward(const void* pre, const void* dy, void* dx, Precision p, int64_t count,
                  cudaStream_t stream);

// y[row, col] += bias[col]; y and bias both of `p`. The GEMM's fallback when cuBLASLt has no
// fused-bias algorithm for a shape or alignment.
void AddBias(void* y, const void* bias, Precision p, int rows, int cols, cudaStream_t stream);

// db[col] += Σ_rows dy[row, col] (dy narrow, fp32 accumulation in a fixed order, as above).
void BiasGrad(const void* dy, Precision p, float* db, float* scratch, int rows, int cols,
              cudaStream_t stream);

// pooled[i, :] = mean over the T tokens of image i of h (fp32).
void MeanPoolForward(const float* h, float* pooled, int n, int tokens, int d, cudaStream_t stream);
// dh[i·T + t, :] = dpooled[i, :] / T, fp32 and narrow.
void MeanPoolBackward(const float* dpooled, float* dh, void* dh_narrow, Precision p, int n,
                      int tokens, int d, cudaStream_t stream);

// One block per sample: loss, argmax, dlogits = (softmax - onehot)·(*loss_scale, or 1 when
// loss_scale is null), narrow; then adds Σ loss and the hits to scalars->loss_sum / correct (one
// block, fixed order: deterministic). row_loss, row_correct: n scratch values.
void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int n, int classes,
                         const float* loss_scale, void* dlogits, Precision p, float* row_loss,
                         int* row_correct, StepScalars* scalars, cudaStream_t stream);

// Σ g² in per-block partials (partials holds GradNormBlocks() doubles), then one block that sums
// them in a fixed order, unscales by the step's loss scale, decides skip (loss or norm not
// finite), updates the loss scale when `dynamic_scale` (trainer/loss_scale.h), and sets the clip
// factor, Adam's count and bias corrections.
int GradNormBlocks();
void GradNormAndPrepare(const float* grads, int64_t count, double* partials,
                        const StepInputs* inputs, const AdamHyper& hyper, bool dynamic_scale,
                        const LossScaleOptions& scale_options, StepScalars* scalars,
                        cudaStream_t stream);

// For every chunk: unless scalars->skipped, g = grad·grad_scale; Adam moments; decoupled decay
// where chunk.decay; writes the narrow copy of the updated parameter.
void AdamWUpdate(const AdamChunk* chunks, int num_chunks, float* params, void* params_narrow,
                 Precision p, const float* grads, float* m, float* v, const StepInputs* inputs,
                 const AdamHyper& hyper, const StepScalars* scalars, cudaStream_t stream);

// dst[i] = src[i] in `p`.
void CastToNarrow(const float* src, void* dst, Precision p, int64_t count, cudaStream_t stream);

}  // namespace sluice::trainer::cuda

#include <algorithm>
#include <string>
#include <utility>

#include "trainer/adamw_step.h"
#include "trainer/cuda_kernels.h"
#include "trainer/gelu.h"
#include "trainer/model_constants.h"

namespace sluice::trainer::cuda {
namespace {

// Every launch goes through Launch(), and dynamic shared memory through DynamicShared(), so that
// tests/trainer/simt_emulator.h can run this file's kernels on the CPU.
#if defined(SLUICE_SIMT_EMULATION)
using ::sluice_simt::DynamicShared;
using ::sluice_simt::Launch;
#else
template <typename... KernelArgs, typename... Args>
void Launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
}

template <typename T>
__device__ T* DynamicShared() {
  extern __shared__ float4 dynamic_shared[];
  return reinterpret_cast<T*>(dynamic_shared);
}
#endif

constexpr int kGradNormBlocks = 1024;
// The largest width whose LayerNorm-backward partials (2·d floats) fit the default 48 KiB of
// shared memory; wider models opt in with LayerNormBackwardSetup.
constexpr int kDefaultSharedWidth = 4096;

// (v/255 - mean)/std as v·scale - shift.
__constant__ float kScale[3] = {1.0f / (255.0f * kImageNetStd[0]),
                                1.0f / (255.0f * kImageNetStd[1]),
                                1.0f / (255.0f * kImageNetStd[2])};
__constant__ float kShift[3] = {kImageNetMean[0] / kImageNetStd[0],
                                kImageNetMean[1] / kImageNetStd[1],
                                kImageNetMean[2] / kImageNetStd[2]};

int Blocks(int64_t count, int threads) {
  const int64_t b = (count + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 32 ? b : 65535 * 32);
}

// Narrow values to and from fp32 (round to nearest even).
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Calls f(T()) with T the device type of `p`: host-side dispatch to a kernel template.
template <typename F>
void WithType(Precision p, F&& f) {
  switch (p) {
    case Precision::kBf16:
      f(bf16());
      break;
    case Precision::kFp16:
      f(__half());
      break;
    case Precision::kFp32:
      f(float());
      break;
  }
}

// The sum over the warp's 32 lanes, in every lane.
template <typename T>
__device__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void NormalizePatchifyKernel(const uint8_t* __restrict__ images, T* __restrict__ x0,
                                        int64_t total, int image_size, int patch, int grid,
                                        int tokens) {
  const int pd = patch * patch * 3;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = e / pd;
    const int col = static_cast<int>(e % pd);
    const int64_t i = row / tokens;
    const int tok = static_cast<int>(row % tokens);
    const int gy = tok / grid, gx = tok % grid;
    const int py = col / (patch * 3), q = col % (patch * 3), c = q % 3;
    const uint8_t v =
        images[((i * image_size + gy * patch + py) * image_size + gx * patch) * 3 + q];
    x0[e] = FromFloat<T>(static_cast<float>(v) * kScale[c] - kShift[c]);
  }
}

// One warp per row.
template <typename T>
__global__ void LayerNormForwardKernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                       const float* __restrict__ beta, T* __restrict__ y,
                                       float* __restrict__ mean, float* __restrict__ rstd, int rows,
                                       int d) {
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t{warps} + threadIdx.x / 32; r < rows;
       r += int64_t{gridDim.x} * warps) {
    const float* xr = x + r * d;
    float sum = 0;
    for (int j = lane; j < d; j += 32) sum += xr[j];
    const float mu = WarpSum(sum) / d;
    float var = 0;
    for (int j = lane; j < d; j += 32) var += (xr[j] - mu) * (xr[j] - mu);
    const float rs = rsqrtf(WarpSum(var) / d + kLayerNormEps);
    T* yr = y + r * d;
    for (int j = lane; j < d; j += 32) yr[j] = FromFloat<T>((xr[j] - mu) * rs * gamma[j] + beta[j]);
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// One warp per row; dgamma/dbeta partials in shared memory, flushed with one atomicAdd per block.
template <typename T>
__global__ void LayerNormBackwardKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                        const float* __restrict__ gamma,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd, float* __restrict__ dx,
                                        T* __restrict__ dx_narrow, float* __restrict__ dgamma,
                                        float* __restrict__ dbeta, int rows, int d,
                                        bool accumulate_dx) {
  float* partial = DynamicShared<float>();  // [0, d): dgamma, [d, 2d): dbeta
  for (int j = threadIdx.x; j < 2 * d; j += blockDim.x) partial[j] = 0;
  __syncthreads();
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t{warps} + threadIdx.x / 32; r < rows;
       r += int64_t{gridDim.x} * warps) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0, sum_gx = 0;
    for (int j = lane; j < d; j += 32) {
      const float xhat = (xr[j] - mu) * rs;
      const float g = dyr[j] * gamma[j];
      sum_g += g;
      sum_gx += g * xhat;
      atomicAdd(&partial[j], dyr[j] * xhat);
      atomicAdd(&partial[d + j], dyr[j]);
    }
    const float mg = WarpSum(sum_g) / d, mgx = WarpSum(sum_gx) / d;
    float* dxr = dx + r * d;
    for (int j = lane; j < d; j += 32) {
      const float xhat = (xr[j] - mu) * rs;
      float v = rs * (dyr[j] * gamma[j] - mg - xhat * mgx);
      if (accumulate_dx) v += dxr[j];
      dxr[j] = v;
      if (dx_narrow != nullptr) dx_narrow[r * d + j] = FromFloat<T>(v);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    atomicAdd(&dgamma[j], partial[j]);
    atomicAdd(&dbeta[j], partial[d + j]);
  }
}

template <typename T>
__global__ void GeluBiasForwardKernel(const T* x, const T* __restrict__ bias, T* pre, T* y,
                                      int64_t total, int cols) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    float v = ToFloat(x[e]);
    if (bias != nullptr) v += ToFloat(bias[e % cols]);
    if (pre != nullptr) pre[e] = FromFloat<T>(v);
    y[e] = FromFloat<T>(Gelu(v));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(const T* __restrict__ pre, const T* dy, T* dx, int64_t total) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    dx[e] = FromFloat<T>(ToFloat(dy[e]) * GeluGrad(ToFloat(pre[e])));
  }
}

template <typename T>
__global__ void AddBiasKernel(T* __restrict__ y, const T* __restrict__ bias, int64_t total,
                              int cols) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    y[e] = FromFloat<T>(ToFloat(y[e]) + ToFloat(bias[e % cols]));
  }
}

// Block (x: 256 columns, y: a slab of rows): sums its slab per column, one atomicAdd each.
constexpr int kBiasRowsPerBlock = 256;
template <typename T>
__global__ void BiasGradKernel(const T* __restrict__ dy, float* __restrict__ db, int rows,
                               int cols) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int64_t begin = int64_t{blockIdx.y} * kBiasRowsPerBlock;
  const int64_t end = min(begin + kBiasRowsPerBlock, int64_t{rows});
  float sum = 0;
  for (int64_t r = begin; r < end; ++r) sum += ToFloat(dy[r * cols + col]);
  atomicAdd(&db[col], sum);
}

__global__ void MeanPoolForwardKernel(const float* __restrict__ h, float* __restrict__ pooled,
                                      int n, int tokens, int d) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e >= int64_t{n} * d) return;
  const int64_t i = e / d;
  const int j = static_cast<int>(e % d);
  float sum = 0;
  for (int t = 0; t < tokens; ++t) sum += h[(i * tokens + t) * d + j];
  pooled[e] = sum / static_cast<float>(tokens);
}

template <typename T>
__global__ void MeanPoolBackwardKernel(const float* __restrict__ dpooled, float* __restrict__ dh,
                                       T* __restrict__ dh_narrow, int64_t total, int tokens,
                                       int d) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = e / d;
    const int j = static_cast<int>(e % d);
    const float v = dpooled[(row / tokens) * d + j] / static_cast<float>(tokens);
    dh[e] = v;
    dh_narrow[e] = FromFloat<T>(v);
  }
}

// One block (256 threads) per row.
template <typename T>
__global__ void SoftmaxCrossEntropyKernel(const float* __restrict__ logits,
                                          const int32_t* __restrict__ labels, int classes,
                                          const float* __restrict__ loss_scale,
                                          T* __restrict__ dlogits, float* __restrict__ row_loss,
                                          int* __restrict__ row_correct) {
  __shared__ float s_val[32];
  __shared__ int s_idx[32];
  __shared__ float s_sum[32];
  const int64_t r = blockIdx.x;
  const float* z = logits + r * classes;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  // Max and argmax (lowest index wins ties, as on the CPU).
  float best = -INFINITY;
  int arg = classes;
  for (int c = threadIdx.x; c < classes; c += blockDim.x) {
    if (z[c] > best || (z[c] == best && c < arg)) {
      best = z[c];
      arg = c;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (ob > best || (ob == best && oa < arg)) {
      best = ob;
      arg = oa;
    }
  }
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = arg;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < warps; ++w) {
      if (s_val[w] > s_val[0] || (s_val[w] == s_val[0] && s_idx[w] < s_idx[0])) {
        s_val[0] = s_val[w];
        s_idx[0] = s_idx[w];
      }
    }
  }
  __syncthreads();
  const float zmax = s_val[0];
  const int argmax = s_idx[0];
  float sum = 0;
  for (int c = threadIdx.x; c < classes; c += blockDim.x) sum += __expf(z[c] - zmax);
  sum = WarpSum(sum);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int w = 0; w < warps; ++w) total += s_sum[w];
    s_sum[0] = total;
  }
  __syncthreads();
  const float log_sum = logf(s_sum[0]) + zmax;
  const int label = labels[r];
  const float scale = loss_scale != nullptr ? *loss_scale : 1.0f;
  for (int c = threadIdx.x; c < classes; c += blockDim.x) {
    const float p = __expf(z[c] - log_sum);
    dlogits[r * classes + c] = FromFloat<T>((c == label ? p - 1.0f : p) * scale);
  }
  if (threadIdx.x == 0) {
    row_loss[r] = log_sum - z[label];
    row_correct[r] = argmax == label ? 1 : 0;
  }
}

// One block: Σ in a fixed order into the step's accumulators.
__global__ void SumLossKernel(const float* __restrict__ row_loss,
                              const int* __restrict__ row_correct, int n, StepScalars* scalars) {
  __shared__ double s_loss[32];
  __shared__ long long s_hits[32];
  double loss = 0;
  long long hits = 0;
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    loss += row_loss[r];
    hits += row_correct[r];
  }
  loss = WarpSum(loss);
  hits = WarpSum(hits);
  if (threadIdx.x % 32 == 0) {
    s_loss[threadIdx.x / 32] = loss;
    s_hits[threadIdx.x / 32] = hits;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      loss += s_loss[w];
      hits += s_hits[w];
    }
    scalars->loss_sum += loss;
    scalars->correct += hits;
  }
}

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

Status LastLaunchError(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::OK();
  return Internal(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                  ")");
}

void NormalizePatchify(const uint8_t* images, void* x0, Precision p, int n, int image_size,
                       int patch, cudaStream_t stream) {
  const int grid = image_size / patch, tokens = grid * grid;
  const int64_t total = int64_t{n} * tokens * patch * patch * 3;
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(NormalizePatchifyKernel<T>, Blocks(total, 256), 256, 0, stream, images,
           static_cast<T*>(x0), total, image_size, patch, grid, tokens);
  });
}

void LayerNormForward(const float* x, const float* gamma, const float* beta, void* y, Precision p,
                      float* mean, float* rstd, int rows, int d, cudaStream_t stream) {
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(LayerNormForwardKernel<T>, Blocks(rows, 8), 256, 0, stream, x, gamma, beta,
           static_cast<T*>(y), mean, rstd, rows, d);
  });
}

Status LayerNormBackwardSetup(int d, Precision p) {
  if (d <= kDefaultSharedWidth) return Status::OK();
  cudaError_t e = cudaSuccess;
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    e = cudaFuncSetAttribute(LayerNormBackwardKernel<T>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(2 * d * sizeof(float)));
  });
  if (e != cudaSuccess) {
    return Internal(std::string("LayerNorm backward for width ") + std::to_string(d) + ": " +
                    cudaGetErrorString(e));
  }
  return Status::OK();
}

void LayerNormBackward(const float* x, const float* dy, const float* gamma, const float* mean,
                       const float* rstd, float* dx, void* dx_narrow, Precision p, float* dgamma,
                       float* dbeta, int rows, int d, bool accumulate_dx, cudaStream_t stream) {
  // Enough blocks to fill the device, few enough that the shared partials amortize.
  const int blocks = std::min(Blocks(rows, 8), 1024);
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(LayerNormBackwardKernel<T>, blocks, 256, 2 * d * sizeof(float), stream, x, dy, gamma,
           mean, rstd, dx, static_cast<T*>(dx_narrow), dgamma, dbeta, rows, d, accumulate_dx);
  });
}

void GeluBiasForward(const void* x, const void* bias, void* pre, void* y, Precision p, int rows,
                     int cols, cudaStream_t stream) {
  const int64_t total = int64_t{rows} * cols;
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(GeluBiasForwardKernel<T>, Blocks(total, 256), 256, 0, stream, static_cast<const T*>(x),
           static_cast<const T*>(bias), static_cast<T*>(pre), static_cast<T*>(y), total, cols);
  });
}

void GeluBackward(const void* pre, const void* dy, void* dx, Precision p, int64_t count,
                  cudaStream_t stream) {
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(GeluBackwardKernel<T>, Blocks(count, 256), 256, 0, stream, static_cast<const T*>(pre),
           static_cast<const T*>(dy), static_cast<T*>(dx), count);
  });
}

void AddBias(void* y, const void* bias, Precision p, int rows, int cols, cudaStream_t stream) {
  const int64_t total = int64_t{rows} * cols;
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(AddBiasKernel<T>, Blocks(total, 256), 256, 0, stream, static_cast<T*>(y),
           static_cast<const T*>(bias), total, cols);
  });
}

void BiasGrad(const void* dy, Precision p, float* db, int rows, int cols, cudaStream_t stream) {
  const dim3 grid((cols + 255) / 256, (rows + kBiasRowsPerBlock - 1) / kBiasRowsPerBlock);
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(BiasGradKernel<T>, grid, 256, 0, stream, static_cast<const T*>(dy), db, rows, cols);
  });
}

void MeanPoolForward(const float* h, float* pooled, int n, int tokens, int d, cudaStream_t stream) {
  Launch(MeanPoolForwardKernel, Blocks(int64_t{n} * d, 256), 256, 0, stream, h, pooled, n, tokens,
         d);
}

void MeanPoolBackward(const float* dpooled, float* dh, void* dh_narrow, Precision p, int n,
                      int tokens, int d, cudaStream_t stream) {
  const int64_t total = int64_t{n} * tokens * d;
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(MeanPoolBackwardKernel<T>, Blocks(total, 256), 256, 0, stream, dpooled, dh,
           static_cast<T*>(dh_narrow), total, tokens, d);
  });
}

void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int n, int classes,
                         const float* loss_scale, void* dlogits, Precision p, float* row_loss,
                         int* row_correct, StepScalars* scalars, cudaStream_t stream) {
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(SoftmaxCrossEntropyKernel<T>, n, 256, 0, stream, logits, labels, classes, loss_scale,
           static_cast<T*>(dlogits), row_loss, row_correct);
  });
  Launch(SumLossKernel, 1, 256, 0, stream, row_loss, row_correct, n, scalars);
}

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

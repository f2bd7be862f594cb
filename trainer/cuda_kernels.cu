// The trainer's layer kernels (trainer/cuda_kernels.h): input normalization and patchify,
// LayerNorm, bias + GELU, bias gradients and mean pooling. The loss and the optimizer are in
// cuda_loss_kernels.cu and cuda_optimizer_kernels.cu.
#include <algorithm>
#include <string>
#include <utility>

#include "trainer/cuda_kernel_support.cuh"
#include "trainer/cuda_kernels.h"
#include "trainer/gelu.h"
#include "trainer/model_constants.h"

namespace sluice::trainer::cuda {
namespace {

// (v/255 - mean)/std as v·scale - shift.
__constant__ float kScale[3] = {1.0f / (255.0f * kImageNetStd[0]),
                                1.0f / (255.0f * kImageNetStd[1]),
                                1.0f / (255.0f * kImageNetStd[2])};
__constant__ float kShift[3] = {kImageNetMean[0] / kImageNetStd[0],
                                kImageNetMean[1] / kImageNetStd[1],
                                kImageNetMean[2] / kImageNetStd[2]};

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

// One warp per row: dx only; dgamma and dbeta come from the column reductions below.
template <typename T>
__global__ void LayerNormBackwardKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                        const float* __restrict__ gamma,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd, float* __restrict__ dx,
                                        T* __restrict__ dx_narrow, int rows, int d,
                                        bool accumulate_dx) {
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t{warps} + threadIdx.x / 32; r < rows;
       r += int64_t{gridDim.x} * warps) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0, sum_gx = 0;
    for (int j = lane; j < d; j += 32) {
      const float g = dyr[j] * gamma[j];
      sum_g += g;
      sum_gx += g * ((xr[j] - mu) * rs);
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
}

// Column sums over rows without atomics, so that they are the same bits on every run (the
// README's determinism promise): pass 1 gives block (x: 256 columns, y: slab s) the sum of its
// columns over the rows of slab s, in row order, into partials[s·cols + col]; pass 2 adds the
// slabs in order into the output. The slab count depends only on the row count, and stays under
// grid.y's 65,535 however many rows there are.
constexpr int kColumnThreads = 256;
constexpr int kMaxSlabs = 128;    // enough blocks to fill a device at the widths trained
constexpr int kMinSlabRows = 64;  // few enough that a thread's loop amortizes its partial

int Slabs(int64_t rows) {
  return static_cast<int>(
      std::clamp<int64_t>((rows + kMinSlabRows - 1) / kMinSlabRows, 1, kMaxSlabs));
}

struct SlabRows {
  int64_t begin, end;
};

__device__ SlabRows SlabOf(int64_t rows) {
  const int64_t per_slab = (rows + gridDim.y - 1) / gridDim.y;
  const int64_t begin = int64_t{blockIdx.y} * per_slab;
  return {begin, min(begin + per_slab, rows)};
}

template <typename T>
__global__ void BiasGradPartialsKernel(const T* __restrict__ dy, float* __restrict__ partials,
                                       int64_t rows, int cols) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const SlabRows slab = SlabOf(rows);
  float sum = 0;
  for (int64_t r = slab.begin; r < slab.end; ++r) sum += ToFloat(dy[r * cols + col]);
  partials[int64_t{blockIdx.y} * cols + col] = sum;
}

// dgamma partials at partials[s·d + j], dbeta partials after all gridDim.y of them.
__global__ void LayerNormParamPartialsKernel(const float* __restrict__ x,
                                             const float* __restrict__ dy,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd,
                                             float* __restrict__ partials, int64_t rows, int d) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const SlabRows slab = SlabOf(rows);
  float sum_gamma = 0, sum_beta = 0;
  for (int64_t r = slab.begin; r < slab.end; ++r) {
    const float g = dy[r * d + j];
    sum_gamma += g * ((x[r * d + j] - mean[r]) * rstd[r]);
    sum_beta += g;
  }
  partials[int64_t{blockIdx.y} * d + j] = sum_gamma;
  partials[(int64_t{gridDim.y} + blockIdx.y) * d + j] = sum_beta;
}

// out[col] += Σ_s partials[s·cols + col], s in order.
__global__ void SumSlabsKernel(const float* __restrict__ partials, int slabs, int cols,
                               float* __restrict__ out) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float sum = 0;
  for (int s = 0; s < slabs; ++s) sum += partials[int64_t{s} * cols + col];
  out[col] += sum;
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

__global__ void MeanPoolForwardKernel(const float* __restrict__ h, float* __restrict__ pooled,
                                      int n, int tokens, int d) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < int64_t{n} * d;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / d;
    const int j = static_cast<int>(e % d);
    float sum = 0;
    for (int t = 0; t < tokens; ++t) sum += h[(i * tokens + t) * d + j];
    pooled[e] = sum / static_cast<float>(tokens);
  }
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

int64_t ColumnReductionScratch(int64_t rows, int cols) { return int64_t{2} * Slabs(rows) * cols; }

void LayerNormBackward(const float* x, const float* dy, const float* gamma, const float* mean,
                       const float* rstd, float* dx, void* dx_narrow, Precision p, float* dgamma,
                       float* dbeta, float* scratch, int rows, int d, bool accumulate_dx,
                       cudaStream_t stream) {
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(LayerNormBackwardKernel<T>, Blocks(rows, 8), 256, 0, stream, x, dy, gamma, mean, rstd,
           dx, static_cast<T*>(dx_narrow), rows, d, accumulate_dx);
  });
  const int slabs = Slabs(rows), column_blocks = (d + kColumnThreads - 1) / kColumnThreads;
  Launch(LayerNormParamPartialsKernel, dim3(column_blocks, slabs), kColumnThreads, 0, stream, x, dy,
         mean, rstd, scratch, int64_t{rows}, d);
  Launch(SumSlabsKernel, column_blocks, kColumnThreads, 0, stream, scratch, slabs, d, dgamma);
  Launch(SumSlabsKernel, column_blocks, kColumnThreads, 0, stream, scratch + int64_t{slabs} * d,
         slabs, d, dbeta);
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

void BiasGrad(const void* dy, Precision p, float* db, float* scratch, int rows, int cols,
              cudaStream_t stream) {
  const int slabs = Slabs(rows), column_blocks = (cols + kColumnThreads - 1) / kColumnThreads;
  WithType(p, [&](auto tag) {
    using T = decltype(tag);
    Launch(BiasGradPartialsKernel<T>, dim3(column_blocks, slabs), kColumnThreads, 0, stream,
           static_cast<const T*>(dy), scratch, int64_t{rows}, cols);
  });
  Launch(SumSlabsKernel, column_blocks, kColumnThreads, 0, stream, scratch, slabs, cols, db);
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

}  // namespace sluice::trainer::cuda

// The trainer's loss kernels (trainer/cuda_kernels.h): softmax cross-entropy forward and
// backward, and the step's loss and accuracy sums.
#include "trainer/cuda_kernel_support.cuh"
#include "trainer/cuda_kernels.h"

namespace sluice::trainer::cuda {
namespace {

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

}  // namespace

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

}  // namespace sluice::trainer::cuda

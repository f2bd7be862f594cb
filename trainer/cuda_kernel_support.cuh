// What the trainer's kernel files (cuda_kernels.cu, cuda_loss_kernels.cu,
// cuda_optimizer_kernels.cu) share: the launch and shared-memory indirections that let
// tests/trainer/simt_emulator.h run them on the CPU, grid sizing, narrow-type conversions, the
// host-side dispatch on Precision and a warp sum. Included by those .cu files only; everything is
// in an anonymous namespace, one copy per translation unit.
#pragma once

#include <utility>

#include "trainer/cuda_kernels.h"

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

inline int Blocks(int64_t count, int threads) {
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

}  // namespace
}  // namespace sluice::trainer::cuda

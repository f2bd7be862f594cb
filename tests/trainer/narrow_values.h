// Host-side reads and writes of values stored in a Precision (trainer/precision.h) — bf16, fp16 or
// fp32, as the CUDA backend's narrow arrays hold them — for the tests that run CUDA code on the
// CPU (tests/trainer/simt_emulator.h, tests/trainer/emulated_device.cc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "trainer/precision.h"

namespace sluice::testing {

inline float LoadNarrow(const void* base, int64_t i, trainer::Precision p) {
  switch (p) {
    case trainer::Precision::kBf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case trainer::Precision::kFp16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case trainer::Precision::kFp32:
      break;
  }
  return static_cast<const float*>(base)[i];
}

// Rounds to nearest even, as the kernels' conversions do.
inline void StoreNarrow(void* base, int64_t i, trainer::Precision p, float v) {
  switch (p) {
    case trainer::Precision::kBf16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(v);
      return;
    case trainer::Precision::kFp16:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      return;
    case trainer::Precision::kFp32:
      break;
  }
  static_cast<float*>(base)[i] = v;
}

}  // namespace sluice::testing

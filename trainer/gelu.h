// GELU in its tanh form, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), and its derivative: the
// form cuBLASLt's GELU epilogues compute, defined once for the CPU backend and the CUDA kernels so
// that both backends train the same function. C++17, host and device.
#pragma once

#include <cmath>

#include "trainer/host_device.h"

namespace sluice::trainer {

SLUICE_HOST_DEVICE inline float Gelu(float x) {
  const float k = 0.7978845608028654f;  // √(2/π)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

SLUICE_HOST_DEVICE inline float GeluGrad(float x) {
  const float k = 0.7978845608028654f;
  const float t = tanhf(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

}  // namespace sluice::trainer

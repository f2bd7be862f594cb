// One parameter's AdamW update (decoupled weight decay), defined once for the CPU optimizer
// (trainer/adamw.cc) and the CUDA AdamW kernel so both apply the same arithmetic in the same
// order. C++17, host and device.
#pragma once

#include <cmath>

#include "trainer/host_device.h"

namespace sluice::trainer {

// g: the (averaged, clipped) gradient; decay: lr·weight_decay, or 0 for tensors without decay;
// c1, c2: the bias corrections 1 - β1^t, 1 - β2^t.
SLUICE_HOST_DEVICE inline void AdamWStep(float g, float lr, float decay, float b1, float b2,
                                         float c1, float c2, float epsilon, float& param, float& m,
                                         float& v) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  param -= decay * param + lr * (m / c1) / (sqrtf(v / c2) + epsilon);
}

}  // namespace sluice::trainer

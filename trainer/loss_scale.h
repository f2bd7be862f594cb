// Dynamic loss scaling for fp16 training: the loss's gradient is multiplied by `scale` before the
// backward pass, so small activation gradients stay above fp16's smallest values; the weight
// gradients are divided by it again before the update. A step whose gradient overflowed (not
// finite) is skipped and the scale backs off; after `growth_interval` clean steps in a row it
// grows. Defaults are PyTorch's GradScaler's, except for the cap (see max_scale).
//
// The update rule is one inline function compiled for both the host (the CPU backend) and the
// device (the CUDA backend's step kernel), so both follow the same sequence of scales.
#pragma once

#include "trainer/host_device.h"

namespace sluice::trainer {

struct LossScaleOptions {
  float initial = 32768.0f;  // 2^15: at the cap, never above it
  float growth = 2.0f;
  float backoff = 0.5f;
  int growth_interval = 2000;  // clean steps in a row before the scale grows
  float min_scale = 1.0f;  // the scale never backs off below this
  // Never grows above this. The scale multiplies the gradient of the SUMMED loss, so a sample's
  // logit gradient (softmax − one-hot, down to −1) is down to −scale: at 2^16, above fp16's largest
  // value 65504, any confidently wrong sample rounds to −inf and the step is skipped each time the
  // scale grows back. 2^15 is the largest power of two whose negation fp16 holds.
  float max_scale = 32768.0f;
};

struct LossScaleState {
  float scale = 1.0f;
  int good_steps = 0;  // clean steps since the last change
};

// After a step: `finite` says whether the step's gradient was finite. Returns true when the
// update may be applied (finite), false when it must be skipped.
SLUICE_HOST_DEVICE inline bool UpdateLossScale(LossScaleState* s, bool finite,
                                               const LossScaleOptions& o) {
  if (!finite) {
    const float backed = s->scale * o.backoff;
    s->scale = backed < o.min_scale ? o.min_scale : backed;
    s->good_steps = 0;
    return false;
  }
  if (++s->good_steps >= o.growth_interval) {
    const float grown = s->scale * o.growth;
    s->scale = grown > o.max_scale ? o.max_scale : grown;
    s->good_steps = 0;
  }
  return true;
}

}  // namespace sluice::trainer

#include "trainer/adamw.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>

#include "trainer/adamw_step.h"

namespace sluice::trainer {

double GlobalNorm(std::span<const float> grads) {
  double sum = 0;
  for (float g : grads) sum += double(g) * g;
  return std::sqrt(sum);
}

AdamW::AdamW(const ParameterLayout& layout, const AdamWOptions& options)
    : layout_(layout), options_(options), m_(layout.total(), 0.0f), v_(layout.total(), 0.0f) {}

void AdamW::Update(std::span<float> params, std::span<float> grads, double grad_norm, float lr) {
  ++updates_;
  const float scale = options_.clip_norm > 0 && grad_norm > options_.clip_norm
                          ? static_cast<float>(options_.clip_norm / grad_norm)
                          : 1.0f;
  const float b1 = options_.beta1, b2 = options_.beta2;
  const double t = static_cast<double>(updates_);
  const float correction1 = static_cast<float>(1.0 - std::pow(double(b1), t));
  const float correction2 = static_cast<float>(1.0 - std::pow(double(b2), t));
  for (const ParameterTensor& tensor : layout_.tensors()) {
    const float decay = tensor.weight_decay ? lr * options_.weight_decay : 0.0f;
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(tensor.offset, tensor.offset + tensor.size, 16384),
        [&](const tbb::blocked_range<int64_t>& r) {
          for (int64_t i = r.begin(); i != r.end(); ++i) {
            const float g = grads[i] * scale;
            grads[i] = g;
            AdamWStep(g, lr, decay, b1, b2, correction1, correction2, options_.epsilon, params[i],
                      m_[i], v_[i]);
          }
        });
  }
}

}  // namespace sluice::trainer

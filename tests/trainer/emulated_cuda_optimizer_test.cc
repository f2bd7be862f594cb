// The CUDA backend's optimizer kernels (gradient norm, the skip/clip/loss-scale decision, AdamW
// over chunks) run on the CPU by tests/trainer/simt_emulator.h, against the CPU optimizer in every
// precision; the layer kernels are in emulated_cuda_kernels_test.cc. Each case runs twice, the
// blocks and the threads between barriers scheduled forwards and then backwards.
#if SLUICE_HAVE_CUDA
#include "tests/trainer/simt_emulator.h"
// This translation unit's copy of the kernels' launch functions stands in for the one in
// sluice_trainer, whose object the linker then never needs.
#include "trainer/cuda_kernels.cu"
#include "trainer/cuda_loss_kernels.cu"
#include "trainer/cuda_optimizer_kernels.cu"

#include "tests/trainer/emulated_cuda_kernels_test_support.h"
#endif

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/trainer/narrow_values.h"
#include "trainer/adamw.h"
#include "trainer/cpu_kernels.h"
#include "trainer/gelu.h"
#include "trainer/model.h"
#include "trainer/precision.h"

#if SLUICE_HAVE_CUDA
namespace sluice::trainer {
namespace {

using kernel_testing::ForEachOrder;
using kernel_testing::Narrow;
using kernel_testing::Random;
using kernel_testing::RequireClose;
using kernel_testing::Rounded;

// The update the CPU applies for gradients summed over `samples` and carrying `loss_scale`.
struct Reference {
  std::vector<float> params, m, v;
  double norm = 0;
};
Reference CpuUpdate(const ParameterLayout& layout, const AdamWOptions& options,
                    const std::vector<float>& params, const std::vector<float>& summed_grads,
                    int samples, float loss_scale, float lr) {
  std::vector<float> grads = summed_grads;
  for (float& g : grads) g = static_cast<float>(g / (double(samples) * loss_scale));
  Reference r;
  r.norm = GlobalNorm(grads);
  AdamW adam(layout, options);
  r.params = params;
  adam.Update(r.params, grads, r.norm, lr);
  r.m = adam.first_moment();
  r.v = adam.second_moment();
  return r;
}

// The device's step tail: grad norm, skip/clip/loss-scale decision, then AdamW over the chunks.
struct DeviceStep {
  std::vector<float> params, m, v;
  Narrow narrow;
  cuda::StepScalars scalars{};
};
DeviceStep RunDeviceUpdate(const ParameterLayout& layout, const AdamWOptions& options,
                           const std::vector<float>& params, const std::vector<float>& grads,
                           int samples, float loss_scale, float lr, Precision p, bool dynamic) {
  DeviceStep s{params, std::vector<float>(params.size(), 0.0f),
               std::vector<float>(params.size(), 0.0f),
               Narrow(p, static_cast<int64_t>(params.size())), {}};
  for (size_t i = 0; i < params.size(); ++i) s.narrow.Set(static_cast<int64_t>(i), params[i]);
  s.scalars.loss_scale = {loss_scale, 0};
  s.scalars.loss_sum = 3.0;
  const cuda::StepInputs inputs{lr, 1.0f / samples};
  const cuda::AdamHyper hyper{options.beta1, options.beta2, options.epsilon, options.weight_decay,
                              options.clip_norm};
  std::vector<double> partials(cuda::GradNormBlocks(), NAN);
  const std::vector<cuda::AdamChunk> chunks = cuda::AdamChunks(layout);
  cuda::GradNormAndPrepare(grads.data(), static_cast<int64_t>(grads.size()), partials.data(),
                           &inputs, hyper, dynamic, LossScaleOptions{}, &s.scalars, nullptr);
  cuda::AdamWUpdate(chunks.data(), static_cast<int>(chunks.size()), s.params.data(),
                    s.narrow.data(), p, grads.data(), s.m.data(), s.v.data(), &inputs, hyper,
                    &s.scalars, nullptr);
  return s;
}

ModelConfig UpdateConfig() {
  ModelConfig c;
  c.image_size = 16;
  c.patch = 8;
  c.width = 40;  // fc1 is 160×40 = 6,400 values: more than one 4,096-value chunk
  c.depth = 1;
  c.classes = 5;
  return c;
}

TEST_CASE("GradNormAndAdamWMatchTheCpuOptimizer") {
  const ParameterLayout layout(UpdateConfig());
  const std::vector<float> params = Random(layout.total(), 22, 0.5f);
  const int samples = 8;
  for (const float clip : {0.0f, 1.0f}) {
    for (const Precision p : {Precision::kFp32, Precision::kFp16}) {
      AdamWOptions options;
      options.clip_norm = clip;
      // Summed over the samples, and scaled by the fp16 loss scale.
      const float loss_scale = p == Precision::kFp16 ? 1024.0f : 1.0f;
      std::vector<float> grads = Random(layout.total(), 23, 0.05f);
      for (float& g : grads) g *= samples * loss_scale;
      const Reference ref = CpuUpdate(layout, options, params, grads, samples, loss_scale, 1e-3f);
      REQUIRE(ref.norm > 1.0);  // so clipping acts when it is on
      INFO("clip " << clip << ", " << PrecisionName(p));
      ForEachOrder([&] {
        const DeviceStep s =
            RunDeviceUpdate(layout, options, params, grads, samples, loss_scale, 1e-3f, p, true);
        CHECK(s.scalars.grad_norm == Approx(ref.norm).epsilon(1e-6));
        CHECK(s.scalars.skipped == 0);
        CHECK(s.scalars.updates == 1);
        CHECK(s.scalars.step_loss_scale == loss_scale);
        CHECK(s.scalars.loss_scale.scale == loss_scale);  // one clean step: no growth yet
        CHECK(s.scalars.loss_scale.good_steps == 1);
        RequireClose(s.m, ref.m, 1e-5, 1e-9);
        RequireClose(s.v, ref.v, 1e-5, 1e-12);
        RequireClose(s.params, ref.params, 1e-6, 1e-7);
        RequireClose(s.narrow.ToFloat(), Rounded(s.params, p), 0, 0);
        for (const ParameterTensor& t : layout.tensors()) {
          INFO(t.name);
          // Adam's first step moves every weight by about lr; no tensor may be left out.
          bool moved = false;
          for (int64_t i = t.offset; i < t.offset + t.size; ++i) moved |= s.params[i] != params[i];
          CHECK(moved);
        }
      });
    }
  }
}

TEST_CASE("NonFiniteGradientSkipsTheUpdateAndBacksOffTheLossScale") {
  const ParameterLayout layout(UpdateConfig());
  const std::vector<float> params = Random(layout.total(), 24, 0.5f);
  std::vector<float> grads = Random(layout.total(), 25, 0.05f);
  grads[layout.total() - 3] = std::numeric_limits<float>::infinity();
  ForEachOrder([&] {
    const DeviceStep s = RunDeviceUpdate(layout, AdamWOptions{}, params, grads, 4, 65536.0f,
                                         1e-3f, Precision::kFp16, true);
    CHECK(s.scalars.skipped == 1);
    CHECK(s.scalars.updates == 0);
    CHECK(s.scalars.step_loss_scale == 65536.0f);
    CHECK(s.scalars.loss_scale.scale == 32768.0f);
    CHECK(s.scalars.loss_scale.good_steps == 0);
    CHECK_FALSE(std::isfinite(s.scalars.grad_norm));
    CHECK(s.params == params);
    CHECK(s.m == std::vector<float>(params.size(), 0.0f));
  });
}

}  // namespace
}  // namespace sluice::trainer
#endif  // SLUICE_HAVE_CUDA

// The CPU backend's backward pass against central finite differences on a tiny model, its
// determinism, and its emulation of the GPU's narrow precisions with loss scaling.
#include "trainer/cpu_backend.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "tests/trainer/backend_test_data.h"
#include "trainer/loss_scale.h"

namespace sluice::trainer {
namespace {

ModelConfig TinyConfig() {
  ModelConfig c;
  c.image_size = 8;
  c.patch = 4;
  c.width = 8;
  c.depth = 2;
  c.classes = 3;
  return c;
}

using testing::MakeBatch;
using testing::RandomParameters;
using testing::RelativeError;
using testing::TestBatch;

TEST_CASE("GradientsMatchFiniteDifferences") {
  const ModelConfig config = TinyConfig();
  CpuBackend backend(config);
  const ParameterLayout& layout = backend.layout();
  const TestBatch batch = MakeBatch(config, 3, 11);
  std::vector<float> params = RandomParameters(layout, 5);
  std::vector<float> grads(layout.total(), 0.0f);
  backend.ForwardBackward(params, batch.images, batch.labels, grads);

  auto loss_at = [&](int64_t index, float value) {
    const float saved = params[index];
    params[index] = value;
    const double loss = backend.Forward(params, batch.images, batch.labels).loss_sum;
    params[index] = saved;
    return loss;
  };
  std::mt19937 pick(7);
  int checked = 0;
  for (const ParameterTensor& t : layout.tensors()) {
    // Every element of small tensors; a few random ones (and the first and last) of larger ones.
    std::vector<int64_t> indices;
    if (t.size <= 8) {
      for (int64_t i = 0; i < t.size; ++i) indices.push_back(i);
    } else {
      indices = {0, t.size - 1};
      for (int r = 0; r < 6; ++r) indices.push_back(static_cast<int64_t>(pick() % t.size));
    }
    for (int64_t i : indices) {
      const int64_t at = t.offset + i;
      const float eps = 1e-2f * std::max(1.0f, std::fabs(params[at]));
      const double numeric =
          (loss_at(at, params[at] + eps) - loss_at(at, params[at] - eps)) / (2.0 * eps);
      const double analytic = grads[at];
      CAPTURE(t.name, i, numeric, analytic);
      CHECK(std::fabs(numeric - analytic) <= 5e-4 + 5e-3 * std::fabs(numeric));
      ++checked;
    }
  }
  CHECK(checked > 50);
}

TEST_CASE("GradientsAccumulateAcrossMicroBatches") {
  // ∂(Σ loss) over a batch of 4 equals the sum of the gradients of its two halves.
  const ModelConfig config = TinyConfig();
  CpuBackend backend(config);
  const ParameterLayout& layout = backend.layout();
  const TestBatch batch = MakeBatch(config, 4, 3);
  const std::vector<float> params = RandomParameters(layout, 9);
  std::vector<float> whole(layout.total(), 0.0f), halves(layout.total(), 0.0f);
  const StepResult all = backend.ForwardBackward(params, batch.images, batch.labels, whole);
  const size_t image_bytes = batch.images.size() / 4;
  double loss = 0;
  for (int h = 0; h < 2; ++h) {
    loss += backend
                .ForwardBackward(
                    params, std::span(batch.images).subspan(h * 2 * image_bytes, 2 * image_bytes),
                    std::span(batch.labels).subspan(h * 2, 2), halves)
                .loss_sum;
  }
  CHECK(loss == Approx(all.loss_sum).epsilon(1e-6));
  for (int64_t i = 0; i < layout.total(); ++i) REQUIRE(halves[i] == Approx(whole[i]).margin(1e-5));
}

TEST_CASE("InitialLossIsNearLogClassesAndRepeatable") {
  ModelConfig config = TinyConfig();
  config.classes = 10;
  CpuBackend backend(config);
  const TestBatch batch = MakeBatch(config, 16, 2);
  const std::vector<float> a = InitParameters(config, backend.layout(), 42);
  const std::vector<float> b = InitParameters(config, backend.layout(), 42);
  REQUIRE(a == b);
  CHECK(a != InitParameters(config, backend.layout(), 43));
  const StepResult r1 = backend.Forward(a, batch.images, batch.labels);
  const StepResult r2 = backend.Forward(a, batch.images, batch.labels);
  CHECK(r1.loss_sum == r2.loss_sum);  // bitwise: the kernels reduce in a fixed order
  CHECK(r1.loss_sum / 16 == Approx(std::log(10.0)).margin(0.1));
}

TEST_CASE("NarrowPrecisionsStayCloseToFp32ButAreNotIt") {
  ModelConfig config = TinyConfig();
  config.width = 16;
  CpuBackend fp32(config);
  const ParameterLayout& layout = fp32.layout();
  const TestBatch batch = MakeBatch(config, 6, 21);
  const std::vector<float> params = RandomParameters(layout, 4);
  std::vector<float> reference(layout.total(), 0.0f);
  const StepResult r = fp32.ForwardBackward(params, batch.images, batch.labels, reference);
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    CpuBackend narrow(config, p);
    std::vector<float> grads(layout.total(), 0.0f);
    const StepResult n = narrow.ForwardBackward(params, batch.images, batch.labels, grads);
    CAPTURE(PrecisionName(p));
    // bf16 keeps 8 significant bits, fp16 11: errors of a few parts in 100 / 1000.
    const double tolerance = p == Precision::kBf16 ? 5e-2 : 1e-2;
    CHECK(n.loss_sum == Approx(r.loss_sum).epsilon(tolerance));
    const double error = RelativeError(grads, reference);
    CHECK(error < tolerance);
    CHECK(error > 0);  // the rounding did happen
  }
}

TEST_CASE("LossScaleMultipliesTheGradientsExactly") {
  const ModelConfig config = TinyConfig();
  CpuBackend backend(config, Precision::kFp16);
  const ParameterLayout& layout = backend.layout();
  const TestBatch batch = MakeBatch(config, 3, 8);
  const std::vector<float> params = RandomParameters(layout, 2);
  std::vector<float> plain(layout.total(), 0.0f), scaled(layout.total(), 0.0f);
  backend.ForwardBackward(params, batch.images, batch.labels, plain, 1.0f);
  backend.ForwardBackward(params, batch.images, batch.labels, scaled, 1024.0f);
  // A power-of-two scale commutes with every rounding while nothing over- or underflows, so the
  // scaled gradients are the plain ones × 1024 — except where fp16 flushed a tiny unscaled value
  // (what loss scaling exists to prevent): compare with a margin for those.
  int64_t exact = 0;
  for (int64_t i = 0; i < layout.total(); ++i) {
    REQUIRE(scaled[i] / 1024.0f == Approx(plain[i]).margin(1e-4).epsilon(1e-2));
    if (scaled[i] == plain[i] * 1024.0f) ++exact;
  }
  CHECK(exact > layout.total() / 2);
}

TEST_CASE("Fp16LossScaleTooHighOverflowsTheGradients") {
  const ModelConfig config = TinyConfig();
  const TestBatch batch = MakeBatch(config, 3, 8);
  CpuBackend fp16(config, Precision::kFp16);
  const std::vector<float> params = RandomParameters(fp16.layout(), 2);
  std::vector<float> grads(fp16.layout().total(), 0.0f);
  // |softmax - onehot| is up to 1: × 2^20 is far past fp16's largest value, 65504.
  const StepResult r = fp16.ForwardBackward(params, batch.images, batch.labels, grads, 0x1p20f);
  CHECK(std::isfinite(r.loss_sum));  // the loss itself is fp32
  bool overflowed = false;
  for (float g : grads) overflowed |= !std::isfinite(g);
  CHECK(overflowed);
  // The same scale in fp32 storage does not overflow.
  CpuBackend fp32(config);
  std::fill(grads.begin(), grads.end(), 0.0f);
  fp32.ForwardBackward(params, batch.images, batch.labels, grads, 0x1p20f);
  for (float g : grads) REQUIRE(std::isfinite(g));
}

TEST_CASE("Fp16GradientsStayFiniteAtTheLossScaleCap") {
  const ModelConfig config = TinyConfig();
  const TestBatch batch = MakeBatch(config, 3, 8);
  CpuBackend fp16(config, Precision::kFp16);
  const ParameterLayout& layout = fp16.layout();
  std::vector<float> params = RandomParameters(layout, 2);
  // Every sample confidently predicts a class none of them has: each logit gradient is −1 at
  // its label, × the scale.
  std::vector<int32_t> labels(batch.labels.size());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 2);
  params[layout.tensors()[layout.head_bias].offset + 2] = 50.0f;
  std::vector<float> grads(layout.total(), 0.0f);
  fp16.ForwardBackward(params, batch.images, labels, grads, LossScaleOptions{}.max_scale);
  for (float g : grads) REQUIRE(std::isfinite(g));
  // The old cap, 2^16, rounds −65536 to −inf in fp16.
  std::fill(grads.begin(), grads.end(), 0.0f);
  fp16.ForwardBackward(params, batch.images, labels, grads, 65536.0f);
  bool overflowed = false;
  for (float g : grads) overflowed |= !std::isfinite(g);
  CHECK(overflowed);
}

}  // namespace
}  // namespace sluice::trainer

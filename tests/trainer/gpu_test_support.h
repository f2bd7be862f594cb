// What the `gpu`-labelled tests (tests/trainer/cuda_*_test.cc, also built against the emulated
// device as trainer_emulated_cuda_backend_test) share: the skip helper and small models.
#pragma once

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ios>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/trainer/backend_test_data.h"
#include "trainer/model.h"
#if SLUICE_HAVE_CUDA
#include "trainer/cpu_backend.h"
#include "trainer/cuda_backend.h"
#include "trainer/cuda_util.h"
#endif

namespace sluice::testing {

// ctest's SKIP_RETURN_CODE for the gpu label (tests/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

// Ends this test process as skipped (77) unless a CUDA device is usable. With the environment's
// SLUICE_REQUIRE_GPU=1 (tests/bench/trainer_gpu.sh sets it on a GPU machine) it fails instead
// (exit 1): there a skip means the driver or the build is wrong, not that the tests passed.
inline void RequireDevice() {
  std::string why;
#if SLUICE_HAVE_CUDA
  std::string reason;
  if (trainer::CudaDeviceCount(&reason) > 0) return;
  why = "no CUDA device (" + reason + ")";
#else
  why = "built without CUDA (nvcc not found)";
#endif
  const char* require = std::getenv("SLUICE_REQUIRE_GPU");
  if (require != nullptr && std::strcmp(require, "1") == 0) {
    std::printf("FAILED: SLUICE_REQUIRE_GPU=1 and %s\n", why.c_str());
    std::fflush(stdout);
    std::exit(1);
  }
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(kSkipExitCode);
}

// Whether a and b hold the same bits (NaN payloads and the sign of zero included), for results
// that must not depend on how a step was run: graph replay or eager launches, a resumed run or an
// uninterrupted one, the emulator's block order.
template <typename T>
bool SameBits(const T& a, const T& b) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  static_assert(std::is_trivially_copyable_v<T>);
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

#if SLUICE_HAVE_CUDA

// GEMM-friendly sizes (multiples of 8) that still run in milliseconds on the CPU.
inline trainer::ModelConfig SmallConfig() {
  trainer::ModelConfig c;
  c.image_size = 32;
  c.patch = 8;
  c.width = 64;
  c.depth = 2;
  c.classes = 10;
  return c;
}

// Sizes that are not multiples of 8: odd leading dimensions (cuBLASLt's less common kernels).
// The parameter slices are still 16-byte aligned (ParameterLayout pads them), so every epilogue
// fuses; the unfused fallback is tested at the GEMM level (emulated_cuda_gemm_cases.cc).
inline trainer::ModelConfig OddConfig() {
  trainer::ModelConfig c;
  c.image_size = 12;
  c.patch = 4;
  c.width = 20;
  c.depth = 2;
  c.classes = 7;
  return c;
}

inline std::unique_ptr<trainer::CudaBackend> MakeGpu(
    const trainer::ModelConfig& config, int max_batch, bool use_graph,
    trainer::Precision precision = trainer::Precision::kBf16,
    float initial_loss_scale = trainer::LossScaleOptions{}.initial,
    bool fused_epilogues = true) {
  trainer::CudaBackendOptions options;
  options.max_batch = max_batch;
  options.use_graph = use_graph;
  options.precision = precision;
  options.loss_scale.initial = initial_loss_scale;
  options.fused_epilogues = fused_epilogues;
  Result<std::unique_ptr<trainer::CudaBackend>> gpu = trainer::CudaBackend::Create(config, options);
  INFO(gpu.status().ToString());
  REQUIRE(gpu.ok());
  return std::move(*gpu);
}

// A backend replaying CUDA Graphs against one launching eagerly, from the same parameters over 6
// steps of batches seeded first_seed, first_seed + 1, ...: steps 0-1 run eagerly (first sight of
// each slot/ticket shape), 2-3 are captured, 4-5 replayed. A replay runs the same kernels and
// GEMM algorithms as the eager launches, so losses, gradient norms and parameters are the same
// bits.
inline void CheckGraphReplayMatchesEager(const trainer::ModelConfig& config, int n, bool fused,
                                         int first_seed) {
  INFO("width " << config.width << ", fused epilogues " << fused);
  trainer::CpuBackend cpu(config);
  const std::vector<float> params = trainer::InitParameters(config, cpu.layout(), 1);
  auto graph = MakeGpu(config, n, /*use_graph=*/true, trainer::Precision::kBf16, 1.0f, fused);
  auto eager = MakeGpu(config, n, /*use_graph=*/false, trainer::Precision::kBf16, 1.0f, fused);
  REQUIRE(graph->SetParameters(params).ok());
  REQUIRE(eager->SetParameters(params).ok());
  for (int s = 0; s < 6; ++s) {
    const TestBatch batch = MakeBatch(config, n, first_seed + s);
    Result<trainer::CudaStepOutcome> a = graph->Step(batch.images, batch.labels, 1e-3f, true);
    Result<trainer::CudaStepOutcome> b = eager->Step(batch.images, batch.labels, 1e-3f, true);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    INFO("step " << s << ": loss " << std::hexfloat << a->result.loss_sum << " vs "
                 << b->result.loss_sum << ", grad norm " << a->grad_norm << " vs " << b->grad_norm);
    CHECK(SameBits(a->result.loss_sum, b->result.loss_sum));
    CHECK(SameBits(a->grad_norm, b->grad_norm));
  }
  INFO("graph error: " << graph->graph_error());
  CHECK(graph->graph_error().empty());
  CHECK(graph->graph_launches() == 4);  // so the comparison is of replays with eager launches
  CHECK(eager->graph_launches() == 0);
  std::vector<float> pa, pb;
  REQUIRE(graph->GetParameters(&pa).ok());
  REQUIRE(eager->GetParameters(&pb).ok());
  CHECK(SameBits(pa, pb));
}

#endif

}  // namespace sluice::testing

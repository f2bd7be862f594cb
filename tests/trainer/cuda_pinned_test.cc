// The GPU checks issue 18 added (ctest label `gpu`; skipped without a device, a failure then under
// SLUICE_REQUIRE_GPU=1): page-locked memory released on client threads while steps are captured,
// graph replay in the less common configurations, evaluation against the CPU, and a step of a
// wide model (width 6400) against the CPU. Also built against the emulated device
// (trainer_emulated_cuda_backend_test), where SLUICE_EMULATED_DEVICE is defined.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "tests/trainer/backend_test_data.h"
#include "tests/trainer/gpu_test_support.h"
#include "trainer/cpu_backend.h"
#if SLUICE_HAVE_CUDA
#include "trainer/cuda_backend.h"
#include "trainer/cuda_util.h"
#endif
#if SLUICE_EMULATED_DEVICE
#include "tests/trainer/emulated_device.h"
#endif

namespace sluice::trainer {
namespace {

using testing::RequireDevice;

#if SLUICE_HAVE_CUDA
using testing::CheckGraphReplayMatchesEager;
using testing::MakeBatch;
using testing::MakeGpu;
using testing::OddConfig;
using testing::RandomParameters;
using testing::SameBits;
using testing::SmallConfig;
using testing::TestBatch;

#endif

TEST_CASE("PinnedAllocatorReusesTheSmallestPooledBufferThatFits") {
  RequireDevice();
#if SLUICE_HAVE_CUDA
  auto allocator = std::make_unique<PinnedAllocator>();
  Result<void*> a = allocator->Allocate(1 << 20);
  Result<void*> b = allocator->Allocate(1 << 16);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(allocator->allocated_bytes() == (1 << 20) + (1 << 16));
  allocator->Free(*a, 1 << 20);
  CHECK(allocator->pooled_bytes() == 1 << 20);
  // The smallest pooled buffer that fits comes back; a larger one is reused for a smaller ask
  // and pooled again at its own size.
  Result<void*> c = allocator->Allocate(1 << 19);
  REQUIRE(c.ok());
  CHECK(*c == *a);
  CHECK(allocator->pooled_bytes() == 0);
  allocator->Free(*c, 1 << 19);
  allocator->Free(*b, 1 << 16);
  CHECK(allocator->pooled_bytes() == (1 << 20) + (1 << 16));
  CHECK(allocator->allocated_bytes() == (1 << 20) + (1 << 16));
  allocator.reset();  // gives the pool back to CUDA
#endif
}

// HostBuffer::Reserve frees, then allocates larger: each growth misses the pool, which gives its
// smaller buffers back, so one buffer is held however many sizes it passed through.
TEST_CASE("PinnedAllocatorGrowingABufferKeepsOnlyTheLargest") {
  RequireDevice();
#if SLUICE_HAVE_CUDA
  auto allocator = std::make_unique<PinnedAllocator>();
#if SLUICE_EMULATED_DEVICE
  const auto pinned_ranges = [] {
    std::lock_guard<std::recursive_mutex> lock(sluice_emulated::mu);
    return sluice_emulated::pinned.size();
  };
  const size_t ranges_before = pinned_ranges();
#endif
  size_t held = 100;
  Result<void*> p = allocator->Allocate(held);
  REQUIRE(p.ok());
  for (const size_t bytes : {200, 300, 1000, 4096}) {
    INFO("growing from " << held << " to " << bytes << " bytes");
    allocator->Free(*p, held);
    p = allocator->Allocate(bytes);
    REQUIRE(p.ok());
    held = bytes;
    CHECK(allocator->allocated_bytes() == bytes);
    CHECK(allocator->pooled_bytes() == 0);
#if SLUICE_EMULATED_DEVICE
    CHECK(pinned_ranges() == ranges_before + 1);
#endif
  }
  // A smaller request is served from the pool and gives nothing back.
  allocator->Free(*p, held);
  Result<void*> q = allocator->Allocate(64);
  REQUIRE(q.ok());
  CHECK(*q == *p);
  CHECK(allocator->allocated_bytes() == 4096);
  allocator->Free(*q, 64);
  allocator.reset();
#if SLUICE_EMULATED_DEVICE
  CHECK(pinned_ranges() == ranges_before);
#endif
#endif
}

TEST_CASE("ClientThreadsReleasingPinnedMemoryDoNotBreakGraphCapture") {
  RequireDevice();
#if SLUICE_HAVE_CUDA
  // A client thread frees batch buffers (leases released, buffers growing) and page-locks and
  // unlocks a segment (streams opened and torn down) while the training thread captures steps:
  // cudaFreeHost and cudaHostUnregister there would invalidate the captures.
  const ModelConfig config = OddConfig();
  const int max_batch = 16;  // 16 shapes, so 16 captures
  auto gpu = MakeGpu(config, max_batch, /*use_graph=*/true);
  CpuBackend cpu(config);
  REQUIRE(gpu->SetParameters(InitParameters(config, cpu.layout(), 1)).ok());
  auto allocator = std::make_shared<PinnedAllocator>();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> rounds{0};
  std::thread client([&] {
    constexpr size_t kSegment = 1 << 16;
    void* segment = std::aligned_alloc(4096, kSegment);
    while (!stop.load()) {
      Result<void*> p = allocator->Allocate(4096 + rounds.load() % 3 * 4096);
      if (p.ok()) allocator->Free(*p, 4096);
      allocator->Adopt(segment, kSegment);
      allocator->Unadopt(segment, kSegment);
      ++rounds;
    }
    std::free(segment);
  });
  // Each batch size is a new shape: seen once eagerly, captured the second time, replayed after.
  for (int round = 0; round < 3; ++round) {
    for (int n = 1; n <= max_batch; ++n) {
      const TestBatch batch = MakeBatch(config, n, 300 + n);
      Result<CudaStepOutcome> out = gpu->Step(batch.images, batch.labels, 0.0f, false);
      INFO(out.status().ToString());
      REQUIRE(out.ok());
    }
  }
  stop = true;
  client.join();
  INFO(rounds.load() << " client rounds; graph error: " << gpu->graph_error());
  CHECK(rounds.load() > 0);
  CHECK(gpu->graph_error().empty());
  CHECK_FALSE(gpu->graphs_given_up());
  CHECK(gpu->graph_launches() > 0);
#endif
}

TEST_CASE("GraphReplayMatchesEagerWithUnfusedEpiloguesAndOddSizes") {
  RequireDevice();
#if SLUICE_HAVE_CUDA
  CheckGraphReplayMatchesEager(SmallConfig(), 16, /*fused=*/false, /*first_seed=*/200);
  CheckGraphReplayMatchesEager(OddConfig(), 8, /*fused=*/true, /*first_seed=*/200);
#endif
}

TEST_CASE("EvaluationForwardMatchesTheCpu") {
  RequireDevice();
#if SLUICE_HAVE_CUDA
  for (const ModelConfig& config : {SmallConfig(), OddConfig()}) {
    INFO("width " << config.width);
    const int n = 8;
    const TestBatch batch = MakeBatch(config, n, 17);
    CpuBackend cpu(config, Precision::kFp32);
    const std::vector<float> params = RandomParameters(cpu.layout(), 5);
    const StepResult expected = cpu.Forward(params, batch.images, batch.labels);
    auto gpu = MakeGpu(config, n, /*use_graph=*/true, Precision::kFp32, 1.0f);
    REQUIRE(gpu->SetParameters(params).ok());
    Result<StepResult> got = gpu->Forward(batch.images, batch.labels);
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(got->loss_sum == Approx(expected.loss_sum).epsilon(0.005));
    CHECK(std::abs(got->correct - expected.correct) <= 1);
  }
#endif
}

TEST_CASE("AWideModelStepMatchesTheCpu") {
  RequireDevice();
#if SLUICE_HAVE_CUDA && !defined(SLUICE_EMULATED_DEVICE)
  // Width 6400, far past the widths trained: each LayerNorm warp loops over 200 values a lane,
  // the column reductions span 25 blocks of columns, and the GEMMs and the device's buffers are
  // at their largest. One token, one layer: ~300 M parameters, fp32. The loss and every
  // tensor's gradient of one step against the CPU's.
  ModelConfig config;
  config.image_size = 8;
  config.patch = 8;
  config.width = 6400;
  config.depth = 1;
  config.classes = 4;
  const int n = 2;
  const TestBatch batch = MakeBatch(config, n, 23);
  CpuBackend cpu(config, Precision::kFp32);
  const std::vector<float> params = RandomParameters(cpu.layout(), 9);
  std::vector<float> cpu_grads(cpu.layout().total(), 0.0f);
  const StepResult expected = cpu.ForwardBackward(params, batch.images, batch.labels, cpu_grads);
  auto gpu = MakeGpu(config, n, /*use_graph=*/false, Precision::kFp32, 1.0f);
  REQUIRE(gpu->SetParameters(params).ok());
  Result<CudaStepOutcome> out = gpu->Step(batch.images, batch.labels, 0.0f, /*update=*/false);
  INFO(out.status().ToString());
  REQUIRE(out.ok());
  CHECK(out->result.loss_sum == Approx(expected.loss_sum).epsilon(0.01));
  std::vector<float> gpu_grads;
  REQUIRE(gpu->GetGradients(&gpu_grads).ok());
  for (const ParameterTensor& t : cpu.layout().tensors()) {
    INFO(t.name);
    CHECK(testing::RelativeError(gpu_grads, cpu_grads, t) < 0.01);
  }
#elif SLUICE_HAVE_CUDA
  SUCCEED("a real device only: ~300 M parameters are hours on the emulated device");
#endif
}

}  // namespace
}  // namespace sluice::trainer

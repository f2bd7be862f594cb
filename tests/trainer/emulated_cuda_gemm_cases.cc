// The GEMMs' fallbacks (trainer/cuda_gemm.h) against faults only the emulated cuBLASLt can inject
// (emulated_cublaslt.h): a heuristic whose first algorithms fail to launch, a fused epilogue
// refused with a status other than NOT_SUPPORTED; the per-shape cache of descriptors and chosen
// algorithm; fused epilogues on the padded parameter slices of odd shapes. Part of
// trainer_emulated_cuda_backend_test only: a real device cannot be told to fail.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "tests/trainer/backend_test_data.h"
#include "tests/trainer/emulated_cublaslt.h"
#include "tests/trainer/emulated_device.h"
#include "tests/trainer/gpu_test_support.h"
#include "trainer/cuda_backend.h"
#include "trainer/cuda_gemm.h"
#include "trainer/cuda_util.h"

namespace sluice::trainer {
namespace {

using sluice_emulated::cublaslt_behaviour;
using sluice_emulated::CublasLtBehaviour;

// Sets the emulated cuBLASLt's behaviour for one test and puts the default back.
class ScopedBehaviour {
 public:
  explicit ScopedBehaviour(const CublasLtBehaviour& b) { cublaslt_behaviour() = b; }
  ~ScopedBehaviour() { cublaslt_behaviour() = CublasLtBehaviour{}; }
};

std::vector<float> Iota(int count, float scale) {
  std::vector<float> v(count);
  for (int i = 0; i < count; ++i) v[i] = scale * static_cast<float>((i * 7) % 11 - 5);
  return v;
}

// D[m×n] = A[m×k]·B[k×n] (+ bias[col]) in fp32 on the emulated device, through `gemm`.
struct Problem {
  static constexpr int m = 4, n = 8, k = 16;
  std::vector<float> a = Iota(m * k, 0.25f), b = Iota(k * n, 0.5f), bias = Iota(n, 1.0f);
  DeviceBuffer da, db, dd, dbias;

  Problem() {
    da = Upload(a);
    db = Upload(b);
    dbias = Upload(bias);
    dd = DeviceBuffer::Allocate(sizeof(float) * m * n).value();
  }
  static DeviceBuffer Upload(const std::vector<float>& v) {
    DeviceBuffer d = DeviceBuffer::Allocate(sizeof(float) * v.size()).value();
    REQUIRE(cudaMemcpyAsync(d.data(), v.data(), sizeof(float) * v.size(), cudaMemcpyHostToDevice,
                            nullptr) == cudaSuccess);
    return d;
  }
  GemmArgs Args(Epilogue epilogue) const {
    GemmArgs x;
    x.m = m, x.n = n, x.k = k;
    x.type = Precision::kFp32;
    x.a = da.data(), x.b = db.data(), x.d = dd.data();
    x.epilogue = epilogue;
    if (epilogue != Epilogue::kNone) x.bias = dbias.data();
    return x;
  }
  // Whether D holds the product (+ bias), exactly: small integers times powers of two.
  bool Correct(bool with_bias) {
    std::vector<float> d(m * n);
    REQUIRE(cudaMemcpyAsync(d.data(), dd.data(), sizeof(float) * d.size(), cudaMemcpyDeviceToHost,
                            nullptr) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        float want = with_bias ? bias[j] : 0.0f;
        for (int p = 0; p < k; ++p) want += a[i * k + p] * b[p * n + j];
        if (d[i * n + j] != want) return false;
      }
    }
    return true;
  }
};

TEST_CASE("GemmTriesTheHeuristicsNextAlgorithmsAndRemembersTheOneThatRan") {
  CublasLtBehaviour b;
  b.algorithms = 4;
  b.failing_algorithms = 2;
  ScopedBehaviour scoped(b);
  Problem problem;
  CublasLtGemm gemm = CublasLtGemm::Create(1 << 20).value();
  const Status first = gemm.Run(problem.Args(Epilogue::kNone), nullptr);
  INFO(first.ToString());
  REQUIRE(first.ok());
  CHECK(problem.Correct(false));
  CHECK(gemm.algorithm_failures() == 2);
  CHECK(cublaslt_behaviour().failed_matmuls == 2);
  CHECK(gemm.heuristic_queries() == 1);
  // The same shape again: the cached plan, starting at the algorithm that ran.
  REQUIRE(gemm.Run(problem.Args(Epilogue::kNone), nullptr).ok());
  CHECK(problem.Correct(false));
  CHECK(gemm.algorithm_failures() == 2);
  CHECK(gemm.heuristic_queries() == 1);
  CHECK(cublaslt_behaviour().heuristic_queries == 1);
}

TEST_CASE("GemmWhoseEveryAlgorithmFailsIsAnError") {
  CublasLtBehaviour b;
  b.algorithms = 3;
  b.failing_algorithms = 3;
  ScopedBehaviour scoped(b);
  Problem problem;
  CublasLtGemm gemm = CublasLtGemm::Create(1 << 20).value();
  const Status s = gemm.Run(problem.Args(Epilogue::kNone), nullptr);
  CHECK_FALSE(s.ok());
  CHECK(gemm.algorithm_failures() == 3);
}

// A failure that may follow a launch (part of a split-K product already accumulated, a capture
// invalidated) is not retried with another algorithm, fused epilogue or not.
TEST_CASE("GemmFailingAfterALaunchIsAnErrorNotARetry") {
  for (const Epilogue epilogue : {Epilogue::kNone, Epilogue::kBias}) {
    INFO("epilogue " << static_cast<int>(epilogue));
    CublasLtBehaviour b;
    b.algorithms = 3;
    b.failing_algorithms = 1;
    b.algorithm_status = CUBLAS_STATUS_EXECUTION_FAILED;
    ScopedBehaviour scoped(b);
    Problem problem;
    CublasLtGemm gemm = CublasLtGemm::Create(1 << 20).value();
    CHECK_FALSE(gemm.Run(problem.Args(epilogue), nullptr).ok());
    CHECK(gemm.algorithm_failures() == 1);
    CHECK(gemm.epilogue_fallbacks() == 0);
  }
}

TEST_CASE("FusedEpilogueRefusedWithAnyStatusRunsAsASeparateKernel") {
  for (const cublasStatus_t refusal :
       {CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_INVALID_VALUE}) {
    INFO("heuristic query status " << static_cast<int>(refusal));
    CublasLtBehaviour b;
    b.epilogue_query_status = refusal;
    ScopedBehaviour scoped(b);
    Problem problem;
    CublasLtGemm gemm = CublasLtGemm::Create(1 << 20).value();
    const Status first = gemm.Run(problem.Args(Epilogue::kBias), nullptr);
    INFO(first.ToString());
    REQUIRE(first.ok());
    CHECK(problem.Correct(true));
    CHECK(gemm.epilogue_fallbacks() == 1);
    CHECK(gemm.heuristic_queries() == 2);  // the fused one, refused; the plain one
    // Refused once, not asked again.
    REQUIRE(gemm.Run(problem.Args(Epilogue::kBias), nullptr).ok());
    CHECK(problem.Correct(true));
    CHECK(gemm.epilogue_fallbacks() == 2);
    CHECK(gemm.heuristic_queries() == 2);
  }
}

TEST_CASE("FusedEpilogueWhoseAlgorithmsAllFailRunsAsASeparateKernel") {
  CublasLtBehaviour b;
  b.algorithms = 3;
  b.epilogue_launch_status = CUBLAS_STATUS_NOT_SUPPORTED;
  ScopedBehaviour scoped(b);
  Problem problem;
  CublasLtGemm gemm = CublasLtGemm::Create(1 << 20).value();
  const Status first = gemm.Run(problem.Args(Epilogue::kBias), nullptr);
  INFO(first.ToString());
  REQUIRE(first.ok());
  CHECK(problem.Correct(true));
  CHECK(gemm.epilogue_fallbacks() == 1);
  CHECK(gemm.algorithm_failures() == 3);  // every fused algorithm, then the plain GEMM ran
  // The fusion is not tried again for this shape.
  REQUIRE(gemm.Run(problem.Args(Epilogue::kBias), nullptr).ok());
  CHECK(problem.Correct(true));
  CHECK(gemm.algorithm_failures() == 3);
  CHECK(gemm.epilogue_fallbacks() == 2);
}

// Odd widths (OddConfig: width 20, so fc1 is 80 wide and GELU_AUX_BIAS applies) would put
// unpadded bf16 bias slices 8 bytes past a 16-byte boundary, where the GEMM runs its epilogues
// unfused (Run requires 16-byte epilogue pointers); padded, every epilogue fuses. Evaluation runs
// eagerly and asks the heuristic nothing new after its first batch.
TEST_CASE("OddShapesFuseEveryEpilogueAndEvaluationReusesItsPlans") {
  const ModelConfig config = testing::OddConfig();
  CudaBackendOptions options;
  options.max_batch = 5;
  options.precision = Precision::kBf16;
  auto gpu = CudaBackend::Create(config, options);
  REQUIRE(gpu.ok());
  const ParameterLayout& layout = (*gpu)->layout();
  REQUIRE((*gpu)->SetParameters(testing::RandomParameters(layout, 3)).ok());
  const testing::TestBatch batch = testing::MakeBatch(config, 5, 2);
  Result<CudaStepOutcome> step = (*gpu)->Step(batch.images, batch.labels, 1e-3f, true);
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  CHECK((*gpu)->epilogue_fallbacks() == 0);
  Result<StepResult> first = (*gpu)->Forward(batch.images, batch.labels);
  REQUIRE(first.ok());
  const int64_t queries = cublaslt_behaviour().heuristic_queries;
  Result<StepResult> second = (*gpu)->Forward(batch.images, batch.labels);
  REQUIRE(second.ok());
  CHECK(cublaslt_behaviour().heuristic_queries == queries);
  CHECK(second->loss_sum == first->loss_sum);
}

}  // namespace
}  // namespace sluice::trainer

// Row-major GEMMs on cuBLASLt: bf16, fp16 or fp32 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F),
// output in the inputs' type or fp32, optional bias and bias+GELU epilogues. Graph-capturable:
// Run only enqueues the matmul (descriptor creation and the heuristic query are host-side work,
// done once per shape).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "trainer/cuda_kernels.h"
#include "trainer/cuda_util.h"

namespace sluice::trainer {

enum class Trans { kNo, kYes };

enum class Epilogue {
  kNone,
  kBias,         // D = A·B + bias[col]
  kGeluAuxBias,  // aux = A·B + bias[col] (the inputs' type), D = GELU(aux) (tanh form)
};

// D[m×n] = op(A)·op(B) (+ beta·C) (+ epilogue), all row-major. op(A) is m×k: A is stored m×k
// (kNo) or k×m (kYes); op(B) is k×n: B is stored k×n (kNo) or n×k (kYes; a weight [out, in]).
// C, when beta != 0, has D's type and shape (it may be D itself).
struct GemmArgs {
  Trans trans_a = Trans::kNo, trans_b = Trans::kNo;
  int m = 0, n = 0, k = 0;
  Precision type = Precision::kBf16;  // of A and B (and of D, C, bias, aux unless d_fp32)
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  bool d_fp32 = false;  // D (and C, bias) fp32; else `type`
  const void* c = nullptr;
  float beta = 0.0f;
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;  // n values of D's type
  void* aux = nullptr;         // kGeluAuxBias: m×n of `type` (n a multiple of 8)

  Precision d_type() const { return d_fp32 ? Precision::kFp32 : type; }
};

// Not thread-safe: one thread (the training thread) calls Run. Descriptors and the heuristic's
// algorithms are made once per shape (PlanKey) and kept, so eager launches (evaluation, the first
// step of each shape) query cuBLASLt once, and a captured graph replays what the eager run chose.
class CublasLtGemm {
 public:
  // Algorithms asked of the heuristic per shape, tried in its order until one runs.
  static constexpr int kAlgorithms = 8;
  // Shapes whose plans are kept; past it the cache starts over.
  static constexpr size_t kMaxPlans = 512;

  // workspace_bytes: cuBLASLt's scratch; 32 MiB lets it pick its fastest Hopper kernels.
  static Result<CublasLtGemm> Create(size_t workspace_bytes = size_t{32} << 20);
  CublasLtGemm();
  ~CublasLtGemm();
  CublasLtGemm(CublasLtGemm&&) noexcept;
  CublasLtGemm& operator=(CublasLtGemm&&) noexcept;

  // When cuBLASLt has no algorithm for the fused epilogue — any failure of its descriptor, its
  // heuristic query or every algorithm's launch — or the bias/aux pointer is less than 16-byte
  // aligned, runs the plain GEMM and applies bias (+GELU) with a kernel instead.
  Status Run(const GemmArgs& args, cudaStream_t stream) const;
  // GEMMs whose epilogue ran as a separate kernel (see Run).
  int64_t epilogue_fallbacks() const { return epilogue_fallbacks_; }
  // Launches of an algorithm that failed, after which the heuristic's next one was tried.
  int64_t algorithm_failures() const { return algorithm_failures_; }
  // Heuristic queries made (one per shape and epilogue).
  int64_t heuristic_queries() const { return heuristic_queries_; }

 private:
  struct Plan;
  // What a plan depends on: the problem, and the operands' alignments the heuristic was told.
  struct PlanKey {
    Trans trans_a, trans_b;
    int m, n, k;
    Precision type;
    bool d_fp32, has_c;
    Epilogue epilogue;
    uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0;  // bytes, cuBLAS's operands
    uint32_t align_bias = 0, align_aux = 0;  // bytes; 0 without that epilogue pointer
    auto operator<=>(const PlanKey&) const = default;
  };

  // The plan for the args' shape, made on first use. A fused epilogue cuBLASLt refuses gives a
  // plan without algorithms, not an error.
  Result<Plan*> PlanFor(const GemmArgs& args) const;
  Result<std::unique_ptr<Plan>> MakePlan(const GemmArgs& args, const PlanKey& key) const;
  // The steps of MakePlan; the first failing call's status.
  static cublasStatus_t Describe(const GemmArgs& args, Plan* plan);
  cublasStatus_t Query(const PlanKey& key, Plan* plan) const;
  // Enqueues one matmul; false (nothing enqueued) when cuBLASLt has no algorithm for it.
  Result<bool> Matmul(const GemmArgs& args, cudaStream_t stream) const;

  mutable int64_t epilogue_fallbacks_ = 0;
  mutable int64_t algorithm_failures_ = 0;
  mutable int64_t heuristic_queries_ = 0;
  CublasLtHandle handle_;
  DeviceBuffer workspace_;
  mutable std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace sluice::trainer

// Row-major GEMMs on cuBLASLt: bf16, fp16 or fp32 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F),
// output in the inputs' type or fp32, optional bias and bias+GELU epilogues. Graph-capturable:
// Run only enqueues the matmul (descriptor creation and the heuristic query are host-side work).
#pragma once

#include <cstdint>

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

class CublasLtGemm {
 public:
  // workspace_bytes: cuBLASLt's scratch; 32 MiB lets it pick its fastest Hopper kernels.
  static Result<CublasLtGemm> Create(size_t workspace_bytes = size_t{32} << 20);

  // When cuBLASLt has no algorithm for the fused epilogue (or the bias/aux pointer is less than
  // 16-byte aligned), runs the plain GEMM and applies bias (+GELU) with a kernel instead.
  Status Run(const GemmArgs& args, cudaStream_t stream) const;
  // GEMMs whose epilogue ran as a separate kernel (see Run).
  int64_t epilogue_fallbacks() const { return epilogue_fallbacks_; }

 private:
  // Enqueues one matmul; false (nothing enqueued) when cuBLASLt has no algorithm for it.
  Result<bool> Matmul(const GemmArgs& args, cudaStream_t stream) const;

  mutable int64_t epilogue_fallbacks_ = 0;
  CublasLtHandle handle_;
  DeviceBuffer workspace_;
};

}  // namespace sluice::trainer

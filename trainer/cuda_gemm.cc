#include "trainer/cuda_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace sluice::trainer {
namespace {

// Owners of the per-call descriptors.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~MatmulDesc() {
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};
struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  ~Layout() {
    if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
  }
};
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

cudaDataType DataType(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return CUDA_R_16BF;
    case Precision::kFp16:
      return CUDA_R_16F;
    case Precision::kFp32:
      break;
  }
  return CUDA_R_32F;
}

// The largest power of two (<= 256) that divides the address.
uint32_t Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

}  // namespace

Result<CublasLtGemm> CublasLtGemm::Create(size_t workspace_bytes) {
  CublasLtGemm g;
  ASSIGN_OR_RETURN(g.handle_, CublasLtHandle::Create());
  ASSIGN_OR_RETURN(g.workspace_, DeviceBuffer::Allocate(workspace_bytes));
  return g;
}

Result<bool> CublasLtGemm::Matmul(const GemmArgs& x, cudaStream_t stream) const {
  // Row-major D = op(A)·op(B) is column-major Dᵀ = op(B)ᵀ·op(A)ᵀ; a row-major buffer read
  // column-major is its transpose, so cuBLAS gets B as its first operand and A as its second,
  // with the same transpose flags, and M = n, N = m.
  const cudaDataType in_type = DataType(x.type);
  const cudaDataType d_type = DataType(x.d_type());
  MatmulDesc op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t first_op = x.trans_b == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second_op = x.trans_a == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_TRANSA, &first_op,
                                              sizeof(first_op)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_TRANSB, &second_op,
                                              sizeof(second_op)));
  if (x.epilogue != Epilogue::kNone) {
    const cublasLtEpilogue_t epi =
        x.epilogue == Epilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias,
                                                sizeof(x.bias)));
    const int32_t bias_type = d_type;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof(bias_type)));
    if (x.epilogue == Epilogue::kGeluAuxBias) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          op.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.aux, sizeof(x.aux)));
      const int64_t aux_ld = x.n;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &aux_ld, sizeof(aux_ld)));
    }
  }
  // Column-major shapes: first operand (B's buffer) is k×n (kNo) or n×k (kYes) as stored
  // row-major, i.e. column-major n×k with ld n, or k×n with ld k.
  Layout first, second, out;
  if (x.trans_b == Trans::kNo) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&first.layout, in_type, x.n, x.k, x.n));
  } else {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&first.layout, in_type, x.k, x.n, x.k));
  }
  if (x.trans_a == Trans::kNo) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&second.layout, in_type, x.k, x.m, x.k));
  } else {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&second.layout, in_type, x.m, x.k, x.m));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.layout, d_type, x.n, x.m, x.n));

  Preference pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  const size_t workspace = workspace_.bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise; parameter slices of the
  // flat array need not be.
  auto alignment = [](const void* p) { return std::max<uint32_t>(2, Alignment(p)); };
  const void* c_ptr = x.beta != 0.0f ? x.c : x.d;
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(x.b)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(x.a)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(c_ptr)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(x.d)},
  };
  for (const auto& [attribute, bytes] : alignments) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.pref, attribute, &bytes, sizeof(bytes)));
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  // NOT_SUPPORTED is how the heuristic says "no algorithm" for some configurations.
  const cublasStatus_t queried = cublasLtMatmulAlgoGetHeuristic(
      handle_.get(), op.desc, first.layout, second.layout, out.layout, out.layout, pref.pref, 1,
      &heuristic, &found);
  if (queried == CUBLAS_STATUS_NOT_SUPPORTED ||
      (queried == CUBLAS_STATUS_SUCCESS &&
       (found == 0 || heuristic.state != CUBLAS_STATUS_SUCCESS)))
    return false;
  CUBLAS_CHECK(queried);
  const float alpha = 1.0f;
  const cublasStatus_t ran = cublasLtMatmul(handle_.get(), op.desc, &alpha, x.b, first.layout, x.a,
                                            second.layout, &x.beta, c_ptr, out.layout, x.d,
                                            out.layout, &heuristic.algo, workspace_.data(),
                                            workspace, stream);
  if (ran == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  CUBLAS_CHECK(ran);
  return true;
}

Status CublasLtGemm::Run(const GemmArgs& x, cudaStream_t stream) const {
  if (x.epilogue == Epilogue::kGeluAuxBias && (x.d_fp32 || x.n % 8 != 0 || x.aux == nullptr))
    return InvalidArgument(
        "GELU epilogue needs output in the inputs' type, an aux buffer and n a multiple of 8");
  if (x.epilogue != Epilogue::kNone && x.bias == nullptr)
    return InvalidArgument("bias epilogue without a bias");
  if (x.epilogue != Epilogue::kNone && Alignment(x.bias) >= 16 &&
      (x.epilogue != Epilogue::kGeluAuxBias || Alignment(x.aux) >= 16)) {
    ASSIGN_OR_RETURN(const bool fused, Matmul(x, stream));
    if (fused) return Status::OK();
  }
  GemmArgs plain = x;
  plain.epilogue = Epilogue::kNone;
  plain.bias = nullptr;
  plain.aux = nullptr;
  // GELU: the plain product goes to aux (the pre-activation), then aux += bias, d = GELU(aux).
  if (x.epilogue == Epilogue::kGeluAuxBias) plain.d = x.aux;
  ASSIGN_OR_RETURN(const bool ran, Matmul(plain, stream));
  if (!ran) {
    return Unimplemented(fmt::format(
        "cuBLASLt has no algorithm for a {}×{}×{} GEMM (trans {} {}, {} inputs, {} output, "
        "beta {})",
        x.m, x.n, x.k, x.trans_a == Trans::kYes, x.trans_b == Trans::kYes, PrecisionName(x.type),
        PrecisionName(x.d_type()), x.beta));
  }
  if (x.epilogue == Epilogue::kNone) return Status::OK();
  ++epilogue_fallbacks_;
  if (x.epilogue == Epilogue::kBias) {
    cuda::AddBias(x.d, x.bias, x.d_type(), x.m, x.n, stream);
  } else {
    cuda::GeluBiasForward(x.aux, x.bias, x.aux, x.d, x.type, x.m, x.n, stream);
  }
  return cuda::LastLaunchError("GEMM epilogue");
}

}  // namespace sluice::trainer

#include "trainer/cuda_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

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

// One shape's descriptors and the heuristic's usable algorithms, in its order.
struct CublasLtGemm::Plan {
  MatmulDesc op;
  Layout first, second, out;
  std::vector<cublasLtMatmulHeuristicResult_t> algorithms;  // empty: none for this shape
  size_t next = 0;  // the algorithm tried first: the one that ran last
};

CublasLtGemm::CublasLtGemm() = default;
CublasLtGemm::~CublasLtGemm() = default;
CublasLtGemm::CublasLtGemm(CublasLtGemm&&) noexcept = default;
CublasLtGemm& CublasLtGemm::operator=(CublasLtGemm&&) noexcept = default;

Result<CublasLtGemm> CublasLtGemm::Create(size_t workspace_bytes) {
  CublasLtGemm g;
  ASSIGN_OR_RETURN(g.handle_, CublasLtHandle::Create());
  ASSIGN_OR_RETURN(g.workspace_, DeviceBuffer::Allocate(workspace_bytes));
  return g;
}

Result<CublasLtGemm::Plan*> CublasLtGemm::PlanFor(const GemmArgs& x) const {
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise; parameter slices of the
  // flat array are only 16-byte aligned (ParameterLayout), activations' offsets less in odd shapes.
  auto alignment = [](const void* p) { return std::max<uint32_t>(2, Alignment(p)); };
  PlanKey key{x.trans_a, x.trans_b, x.m, x.n, x.k, x.type, x.d_fp32, x.beta != 0.0f, x.epilogue};
  key.align_a = alignment(x.b);  // cuBLAS's A is our B (see Describe)
  key.align_b = alignment(x.a);
  key.align_c = alignment(x.beta != 0.0f ? x.c : x.d);
  key.align_d = alignment(x.d);
  // The heuristic was told the first call's epilogue pointers: a slice aligned less than that
  // needs a plan of its own.
  if (x.epilogue != Epilogue::kNone) key.align_bias = alignment(x.bias);
  if (x.epilogue == Epilogue::kGeluAuxBias) key.align_aux = alignment(x.aux);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    // A model has a few dozen shapes per batch size; the bound only stops a caller that varies
    // them without end. Nothing keeps a plan across calls (a captured graph holds no descriptor).
    if (plans_.size() >= kMaxPlans) plans_.clear();
    ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, MakePlan(x, key));
    it = plans_.emplace(key, std::move(plan)).first;
  }
  return it->second.get();
}

// The first status of a cuBLASLt call that failed, from a function returning cublasStatus_t.
#define SLUICE_CUBLAS_RETURN(expr)                                      \
  do {                                                                  \
    const cublasStatus_t _sluice_status = (expr);                       \
    if (_sluice_status != CUBLAS_STATUS_SUCCESS) return _sluice_status; \
  } while (0)

cublasStatus_t CublasLtGemm::Describe(const GemmArgs& x, Plan* plan) {
  // Row-major D = op(A)·op(B) is column-major Dᵀ = op(B)ᵀ·op(A)ᵀ; a row-major buffer read
  // column-major is its transpose, so cuBLAS gets B as its first operand and A as its second,
  // with the same transpose flags, and M = n, N = m.
  const cudaDataType in_type = DataType(x.type);
  const cudaDataType d_type = DataType(x.d_type());
  cublasLtMatmulDesc_t& op = plan->op.desc;
  SLUICE_CUBLAS_RETURN(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t first_op = x.trans_b == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second_op = x.trans_a == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
  SLUICE_CUBLAS_RETURN(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &first_op, sizeof(first_op)));
  SLUICE_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &second_op,
                                                      sizeof(second_op)));
  if (x.epilogue != Epilogue::kNone) {
    const cublasLtEpilogue_t epi =
        x.epilogue == Epilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    SLUICE_CUBLAS_RETURN(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // The heuristic sees this call's pointers; Matmul sets each call's before it runs.
    SLUICE_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &x.bias, sizeof(x.bias)));
    const int32_t bias_type = d_type;
    SLUICE_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                        &bias_type, sizeof(bias_type)));
    if (x.epilogue == Epilogue::kGeluAuxBias) {
      SLUICE_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(
          op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.aux, sizeof(x.aux)));
      const int64_t aux_ld = x.n;
      SLUICE_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                          &aux_ld, sizeof(aux_ld)));
    }
  }
  // Column-major shapes: first operand (B's buffer) is k×n (kNo) or n×k (kYes) as stored
  // row-major, i.e. column-major n×k with ld n, or k×n with ld k.
  if (x.trans_b == Trans::kNo) {
    SLUICE_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&plan->first.layout, in_type, x.n, x.k, x.n));
  } else {
    SLUICE_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&plan->first.layout, in_type, x.k, x.n, x.k));
  }
  if (x.trans_a == Trans::kNo) {
    SLUICE_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&plan->second.layout, in_type, x.k, x.m, x.k));
  } else {
    SLUICE_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&plan->second.layout, in_type, x.m, x.k, x.m));
  }
  return cublasLtMatrixLayoutCreate(&plan->out.layout, d_type, x.n, x.m, x.n);
}

cublasStatus_t CublasLtGemm::Query(const PlanKey& key, Plan* plan) const {
  Preference pref;
  SLUICE_CUBLAS_RETURN(cublasLtMatmulPreferenceCreate(&pref.pref));
  const size_t workspace = workspace_.bytes();
  SLUICE_CUBLAS_RETURN(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d},
  };
  for (const auto& [attribute, bytes] : alignments) {
    SLUICE_CUBLAS_RETURN(
        cublasLtMatmulPreferenceSetAttribute(pref.pref, attribute, &bytes, sizeof(bytes)));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> found_algorithms(kAlgorithms);
  int found = 0;
  ++heuristic_queries_;
  SLUICE_CUBLAS_RETURN(cublasLtMatmulAlgoGetHeuristic(
      handle_.get(), plan->op.desc, plan->first.layout, plan->second.layout, plan->out.layout,
      plan->out.layout, pref.pref, kAlgorithms, found_algorithms.data(), &found));
  for (int i = 0; i < std::min(found, kAlgorithms); ++i) {
    if (found_algorithms[i].state == CUBLAS_STATUS_SUCCESS)
      plan->algorithms.push_back(found_algorithms[i]);
  }
  return CUBLAS_STATUS_SUCCESS;
}

#undef SLUICE_CUBLAS_RETURN

Result<std::unique_ptr<CublasLtGemm::Plan>> CublasLtGemm::MakePlan(const GemmArgs& x,
                                                                   const PlanKey& key) const {
  auto plan = std::make_unique<Plan>();
  cublasStatus_t status = Describe(x, plan.get());
  if (status == CUBLAS_STATUS_SUCCESS) status = Query(key, plan.get());
  if (status == CUBLAS_STATUS_SUCCESS) return plan;
  // A fused epilogue cuBLASLt refuses in any way (an attribute, the heuristic query) runs
  // unfused instead; NOT_SUPPORTED is how the heuristic says "no algorithm" for some
  // configurations. Either is a plan without algorithms, kept so it is not asked again.
  plan->algorithms.clear();
  if (x.epilogue != Epilogue::kNone || status == CUBLAS_STATUS_NOT_SUPPORTED) return plan;
  return CublasError(status, "cuBLASLt matmul descriptors or heuristic query", __FILE__, __LINE__);
}

Result<bool> CublasLtGemm::Matmul(const GemmArgs& x, cudaStream_t stream) const {
  ASSIGN_OR_RETURN(auto plan, PlanFor(x));  // Plan*, owned by plans_
  if (plan->algorithms.empty()) return false;
  if (x.epilogue != Epilogue::kNone) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &x.bias, sizeof(x.bias)));
    if (x.epilogue == Epilogue::kGeluAuxBias) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan->op.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.aux, sizeof(x.aux)));
    }
  }
  const float alpha = 1.0f;
  const void* c_ptr = x.beta != 0.0f ? x.c : x.d;
  // From the algorithm that ran last time, on through the heuristic's list. Only a refusal made
  // before anything is enqueued (NOT_SUPPORTED, INVALID_VALUE: an alignment or workspace the
  // algorithm cannot meet after all) moves on to the next one. Any other failure may have come
  // from a launch — part of a split-K product already added into an accumulating output, a
  // stream capture already invalidated — so it is an error, and the plan stays as it is.
  const size_t count = plan->algorithms.size();
  for (size_t tried = 0; tried < count; ++tried) {
    const size_t i = (plan->next + tried) % count;
    const cublasStatus_t ran =
        cublasLtMatmul(handle_.get(), plan->op.desc, &alpha, x.b, plan->first.layout, x.a,
                       plan->second.layout, &x.beta, c_ptr, plan->out.layout, x.d, plan->out.layout,
                       &plan->algorithms[i].algo, workspace_.data(), workspace_.bytes(), stream);
    if (ran == CUBLAS_STATUS_SUCCESS) {
      plan->next = i;
      return true;
    }
    ++algorithm_failures_;
    if (ran != CUBLAS_STATUS_NOT_SUPPORTED && ran != CUBLAS_STATUS_INVALID_VALUE) {
      return CublasError(ran, "cublasLtMatmul", __FILE__, __LINE__);
    }
  }
  // Every algorithm refused: a fused epilogue runs unfused (and is not tried again for this
  // shape); for a plain GEMM, Run says no algorithm fits.
  if (x.epilogue != Epilogue::kNone) plan->algorithms.clear();
  return false;
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

// The cuBLASLt calls the trainer makes, on the emulated device (emulated_device.h): column-major
// D = α·op(A)·op(B) + β·C with fp32 accumulation, the BIAS and GELU_AUX_BIAS epilogues; the
// heuristic's algorithms and their faults as emulated_cublaslt.h sets them.
#include "tests/trainer/emulated_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "tests/trainer/emulated_device.h"
#include "tests/trainer/narrow_values.h"
#include "trainer/gelu.h"

using sluice_emulated::DeviceRange;
using sluice_emulated::Enqueue;
using sluice_emulated::Fault;
using sluice_emulated::mu;
using sluice_emulated::Stream;

namespace sluice_emulated {

CublasLtBehaviour& cublaslt_behaviour() {
  static CublasLtBehaviour behaviour;
  return behaviour;
}

}  // namespace sluice_emulated

namespace {

// Values of a cuBLASLt data type: the types the trainer's precisions store.
sluice::trainer::Precision PrecisionOf(cudaDataType type) {
  switch (type) {
    case CUDA_R_16BF:
      return sluice::trainer::Precision::kBf16;
    case CUDA_R_16F:
      return sluice::trainer::Precision::kFp16;
    default:
      return sluice::trainer::Precision::kFp32;
  }
}
float Load(const void* base, int64_t i, cudaDataType type) {
  return sluice::testing::LoadNarrow(base, i, PrecisionOf(type));
}
void Store(void* base, int64_t i, cudaDataType type, float v) {
  sluice::testing::StoreNarrow(base, i, PrecisionOf(type), v);
}
int64_t SizeOf(cudaDataType type) { return sluice::trainer::ElementSize(PrecisionOf(type)); }

struct LtDesc {
  cublasComputeType_t compute;
  cudaDataType scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct LtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct LtPreference {
  uint64_t workspace = 0;
};

LtDesc* Desc(cublasLtMatmulDesc_t d) { return reinterpret_cast<LtDesc*>(d); }
LtLayout* Layout(cublasLtMatrixLayout_t l) { return reinterpret_cast<LtLayout*>(l); }

template <typename T>
bool SetField(T* field, const void* buf, size_t bytes) {
  if (bytes != sizeof(T)) return false;
  std::memcpy(field, buf, sizeof(T));
  return true;
}

// The checks cuBLASLt makes of a problem; empty when it is well formed.
std::string Validate(const LtDesc& d, const LtLayout& a, const LtLayout& b, const LtLayout& c,
                     const LtLayout& out) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F)
    return "only CUBLAS_COMPUTE_32F with fp32 scale is emulated";
  const uint64_t m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t k2 = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != k2) return "op(A) and op(B) disagree on k";
  if (c.rows != m || c.cols != n || out.rows != m || out.cols != n)
    return "C or D is not op(A)'s rows × op(B)'s columns";
  for (const LtLayout* l : {&a, &b, &c, &out}) {
    if (l->ld < static_cast<int64_t>(l->rows)) return "a leading dimension below its rows";
  }
  if (a.type != b.type) return "A and B of different types";
  if (c.type != out.type) return "C and D of different types";
  if (d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    if (d.aux_ld < static_cast<int64_t>(m) || d.aux_ld % 8 != 0)
      return "GELU aux leading dimension below M or not a multiple of 8";
    if (out.type == CUDA_R_32F && a.type != CUDA_R_32F) return "GELU aux with fp32 output";
  }
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS &&
      d.epilogue != CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
    return "epilogue not emulated";
  return "";
}

int64_t Extent(const LtLayout& l) {
  return l.cols == 0 ? 0 : static_cast<int64_t>(l.cols - 1) * l.ld + static_cast<int64_t>(l.rows);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new LtDesc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete Desc(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buf, size_t bytes) {
  LtDesc* d = Desc(desc);
  bool ok = false;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = SetField(&d->trans_a, buf, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = SetField(&d->trans_b, buf, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = SetField(&d->epilogue, buf, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      ok = SetField(&d->bias, buf, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      ok = SetField(&d->bias_type, buf, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      ok = SetField(&d->aux, buf, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      ok = SetField(&d->aux_ld, buf, bytes);
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // an attribute this emulation does not know
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new LtLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete Layout(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new LtPreference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<LtPreference*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buf, size_t bytes) {
  auto* p = reinterpret_cast<LtPreference*>(pref);
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return SetField(&p->workspace, buf, bytes) ? CUBLAS_STATUS_SUCCESS
                                                 : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return bytes == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* found) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  sluice_emulated::CublasLtBehaviour& behaviour = sluice_emulated::cublaslt_behaviour();
  ++behaviour.heuristic_queries;
  *found = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const std::string problem = Validate(*Desc(desc), *Layout(a), *Layout(b), *Layout(c), *Layout(d));
  if (!problem.empty()) {
    Fault("cublasLtMatmulAlgoGetHeuristic: " + problem);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (Desc(desc)->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      behaviour.epilogue_query_status != CUBLAS_STATUS_SUCCESS)
    return behaviour.epilogue_query_status;
  // Algorithm i carries its index, so that cublasLtMatmul knows which one it was given.
  const int count = std::min(requested, behaviour.algorithms);
  for (int i = 0; i < count; ++i) {
    results[i] = {};
    results[i].algo.data[0] = static_cast<uint64_t>(i);
    results[i].state = CUBLAS_STATUS_SUCCESS;
  }
  *found = count;
  return count > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a_ptr, cublasLtMatrixLayout_t a_layout, const void* b_ptr,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c_ptr,
                              cublasLtMatrixLayout_t c_layout, void* d_ptr,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void*, size_t, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  sluice_emulated::CublasLtBehaviour& behaviour = sluice_emulated::cublaslt_behaviour();
  if (algo != nullptr &&
      algo->data[0] < static_cast<uint64_t>(std::max(0, behaviour.failing_algorithms))) {
    ++behaviour.failed_matmuls;
    return behaviour.algorithm_status;
  }
  if (Desc(desc)->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      behaviour.epilogue_launch_status != CUBLAS_STATUS_SUCCESS) {
    ++behaviour.failed_matmuls;
    return behaviour.epilogue_launch_status;
  }
  // Descriptors are read now (the caller may destroy them once this returns); so are the host
  // scalars α and β (CUBLASLT_POINTER_MODE_HOST).
  const LtDesc d = *Desc(desc);
  const LtLayout a = *Layout(a_layout), b = *Layout(b_layout), c = *Layout(c_layout),
                 out = *Layout(d_layout);
  const std::string problem = Validate(d, a, b, c, out);
  if (!problem.empty()) {
    Fault("cublasLtMatmul: " + problem);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float alpha_v = *static_cast<const float*>(alpha);
  const float beta_v = *static_cast<const float*>(beta);
  const int64_t m = static_cast<int64_t>(out.rows), n = static_cast<int64_t>(out.cols);
  const int64_t k = static_cast<int64_t>(d.trans_a == CUBLAS_OP_N ? a.cols : a.rows);
  const cudaDataType bias_type =
      d.bias_type < 0 ? out.type : static_cast<cudaDataType>(d.bias_type);
  struct Operand {
    const char* name;
    const void* p;
    int64_t bytes;
  };
  std::vector<Operand> operands = {{"A", a_ptr, Extent(a) * SizeOf(a.type)},
                                   {"B", b_ptr, Extent(b) * SizeOf(b.type)},
                                   {"D", d_ptr, Extent(out) * SizeOf(out.type)}};
  if (beta_v != 0.0f) operands.push_back({"C", c_ptr, Extent(c) * SizeOf(c.type)});
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    operands.push_back({"bias", d.bias, m * SizeOf(bias_type)});
  if (d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    operands.push_back({"aux", d.aux, ((n - 1) * d.aux_ld + m) * SizeOf(out.type)});
  }
  for (const Operand& o : operands) {
    if (DeviceRange(o.p, static_cast<size_t>(o.bytes)) == nullptr) {
      Fault(std::string("cublasLtMatmul: ") + o.name + " (" + std::to_string(o.bytes) +
            " bytes) is not inside one device allocation");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  Enqueue(Stream(stream), [=] {
    // op(A) as m×k and op(B) as k×n in fp32, then column j of D at a time.
    std::vector<float> fa(m * k), fb(k * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        fa[p * m + i] = Load(a_ptr, d.trans_a == CUBLAS_OP_N ? i + p * a.ld : p + i * a.ld, a.type);
      }
    }
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < n; ++j) {
        fb[j * k + p] = Load(b_ptr, d.trans_b == CUBLAS_OP_N ? p + j * b.ld : j + p * b.ld, b.type);
      }
    }
    tbb::parallel_for(int64_t{0}, n, [&](int64_t j) {
      std::vector<float> acc(m, 0.0f);
      for (int64_t p = 0; p < k; ++p) {
        const float bv = fb[j * k + p];
        const float* col = fa.data() + p * m;
        for (int64_t i = 0; i < m; ++i) acc[i] += col[i] * bv;
      }
      for (int64_t i = 0; i < m; ++i) {
        float v = alpha_v * acc[i];
        if (beta_v != 0.0f) v += beta_v * Load(c_ptr, i + j * c.ld, c.type);
        if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT) v += Load(d.bias, i, bias_type);
        if (d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
          Store(d.aux, i + j * d.aux_ld, out.type, v);
          v = sluice::trainer::Gelu(v);
        }
        Store(d_ptr, i + j * out.ld, out.type, v);
      }
    });
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// Knobs and counters of the emulated cuBLASLt (emulated_cublaslt.cc), for tests of how the
// trainer's GEMMs (trainer/cuda_gemm.h) handle what real cuBLASLt may do: return several
// algorithms of which the first ones fail to launch, refuse a fused epilogue with any status.
// Guarded by sluice_emulated::mu. Internal to trainer_emulated_cuda_backend_test.
#pragma once

#include <cublasLt.h>

#include <cstdint>

namespace sluice_emulated {

struct CublasLtBehaviour {
  // Algorithms a heuristic query returns (at most as many as requested).
  int algorithms = 3;
  // cublasLtMatmul with one of the first `failing_algorithms` a query returned fails with
  // `algorithm_status` and enqueues nothing (as real cuBLASLt does for NOT_SUPPORTED and
  // INVALID_VALUE; other statuses may come after a launch).
  int failing_algorithms = 0;
  cublasStatus_t algorithm_status = CUBLAS_STATUS_NOT_SUPPORTED;
  // Heuristic queries of a descriptor with a bias epilogue return this (SUCCESS: they succeed);
  // so does cublasLtMatmul with such a descriptor, whichever the algorithm.
  cublasStatus_t epilogue_query_status = CUBLAS_STATUS_SUCCESS;
  cublasStatus_t epilogue_launch_status = CUBLAS_STATUS_SUCCESS;

  int64_t heuristic_queries = 0;  // counted, whatever they return
  int64_t failed_matmuls = 0;     // launches refused by the knobs above
};

// The emulated library's one behaviour; tests set it and put it back (CublasLtBehaviour{}).
CublasLtBehaviour& cublaslt_behaviour();

}  // namespace sluice_emulated

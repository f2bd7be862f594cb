// An emulated CUDA device for tests on machines without a GPU: the CUDA runtime and cuBLASLt
// calls the trainer makes, defined over host memory, so that the CUDA backend and the GPU
// training loop (trainer/cuda_backend*.cc, trainer/trainer.cc) run unchanged on the CPU. Linked
// instead of libcudart and libcublasLt into trainer_emulated_cuda_backend_test, which is
// tests/trainer/cuda_backend_test.cc built against it; kernels run under
// tests/trainer/simt_emulator.h.
//
// The model is strict where our code could be wrong, and lazy where the hardware is:
// - Work on a stream runs only when something waits for it (a stream or event synchronization,
//   an elapsed-time query of completed events, a copy to pageable memory, freeing memory), in
//   order, and a stream waiting on an event first runs the recording stream up to it. So a host
//   buffer rewritten while a queued copy still reads it, or a result read before its stream was
//   synchronized, shows up as wrong data.
// - Device memory is filled with NaN bytes when allocated and surrounded by guard bytes that are
//   checked at every synchronization; a kernel may be handed only device pointers; a GEMM's
//   operands must lie inside one device allocation; a copy's device side too.
// - Capture (cudaStreamCaptureModeThreadLocal) records the stream's work into a graph instead of
//   running it; a synchronizing or allocating call from the capturing thread invalidates the
//   capture, as a copy from pageable memory does.
// - cuBLASLt: column-major D = α·op(A)·op(B) + β·C with fp32 accumulation over k in order, the
//   BIAS and GELU_AUX_BIAS epilogues (GELU's tanh form, trainer/gelu.h), bf16/fp16/fp32 types.
// A fault is kept (Error()), printed once, and makes every later synchronization fail.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <oneapi/tbb/parallel_for.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/trainer/narrow_values.h"
#include "tests/trainer/simt_emulator.h"
#include "trainer/gelu.h"

struct CUstream_st {
  std::deque<std::function<void()>> queue;
  bool draining = false;
  bool capturing = false;
  bool capture_invalid = false;
  std::vector<std::function<void()>> captured;
};

struct CUevent_st {
  bool timing = true;
  CUstream_st* stream = nullptr;  // of the last record
  int64_t recorded = 0;           // records so far
  int64_t completed = 0;          // records that have run
  double ms = 0;                  // when the last completed record ran
};

struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};
struct cublasLtContext {
  int unused = 0;
};

namespace {

constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xA5;

struct Allocation {
  size_t bytes;
  unsigned char* block;  // kGuard + bytes + kGuard
};

// One lock for the whole emulated device: the trainer's client threads call cudaHostAlloc and
// cudaHostRegister while the training thread runs steps.
std::recursive_mutex mu;
std::map<uintptr_t, Allocation> device;          // by user pointer
std::map<uintptr_t, size_t> pinned;              // cudaHostAlloc and cudaHostRegister ranges
std::vector<CUstream_st*> streams;               // live ones
CUstream_st legacy_stream;                       // the null stream
cudaError_t last_error = cudaSuccess;
std::string fault;                               // the first fault; sticky
thread_local CUstream_st* capturing = nullptr;   // the stream this thread captures on

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Fault(const std::string& what) {
  if (!fault.empty()) return;
  fault = what;
  std::fprintf(stderr, "emulated CUDA device: %s\n", what.c_str());
}

CUstream_st* Stream(cudaStream_t s) { return s == nullptr ? &legacy_stream : s; }

// The device allocation holding [p, p + bytes), or null.
const Allocation* DeviceRange(const void* p, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = device.upper_bound(address);
  if (it == device.begin()) return nullptr;
  --it;
  if (address + bytes > it->first + it->second.bytes) return nullptr;
  return &it->second;
}

bool PinnedRange(const void* p, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = pinned.upper_bound(address);
  if (it == pinned.begin()) return false;
  --it;
  return address + bytes <= it->first + it->second;
}

void CheckGuards() {
  for (const auto& [address, a] : device) {
    for (size_t i = 0; i < kGuard; ++i) {
      if (a.block[i] != kGuardByte || a.block[kGuard + a.bytes + i] != kGuardByte) {
        Fault("device buffer of " + std::to_string(a.bytes) + " bytes written out of bounds");
        return;
      }
    }
  }
}

void RunOp(const std::function<void()>& op) {
  op();
  if (!sluice_simt::LastError().empty()) {
    Fault("kernel: " + sluice_simt::LastError());
    sluice_simt::ClearError();
  }
}

// Runs the stream's queued work: all of it, or until `until` returns true. A stream asked to
// run further while its own current operation waits (on an event of a stream that waits on it)
// would deadlock on a GPU.
void Drain(CUstream_st* s, const std::function<bool()>& until = nullptr) {
  if (s->draining) {
    if (!(until && until())) Fault("deadlock: two streams wait on each other's events");
    return;
  }
  s->draining = true;
  while (!s->queue.empty() && !(until && until())) {
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    RunOp(op);
  }
  s->draining = false;
}

void DrainEvent(CUevent_st* e, int64_t record) {
  if (e->stream == nullptr) return;
  Drain(e->stream, [e, record] { return e->completed >= record; });
}

void DrainAll() {
  for (CUstream_st* s : streams) Drain(s);
  Drain(&legacy_stream);
}

cudaError_t Synchronized() {
  CheckGuards();
  return fault.empty() ? cudaSuccess : cudaErrorLaunchFailure;
}

// Appends work to the stream, or to the graph being captured on it.
void Enqueue(CUstream_st* s, std::function<void()> op) {
  if (s->capturing) {
    s->captured.push_back(std::move(op));
  } else {
    s->queue.push_back(std::move(op));
  }
}

// A call the capturing thread may not make (cudaStreamCaptureModeThreadLocal).
bool RefusedInCapture() {
  if (capturing == nullptr) return false;
  capturing->capture_invalid = true;
  last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

cudaError_t Fail(cudaError_t error, const std::string& what) {
  Fault(what);
  last_error = error;
  return error;
}

struct InstallHooks {
  InstallHooks() {
    sluice_simt::runtime.enqueue = [](cudaStream_t s, std::function<void()> op) {
      std::lock_guard<std::recursive_mutex> lock(mu);
      Enqueue(Stream(s), std::move(op));
    };
    sluice_simt::runtime.is_device_pointer = [](const void* p) {
      std::lock_guard<std::recursive_mutex> lock(mu);
      return DeviceRange(p, 1) != nullptr;
    };
  }
} install_hooks;

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

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device_index) {
  return device_index == 0 ? cudaSuccess : (last_error = cudaErrorInvalidDevice);
}

cudaError_t cudaGetLastError(void) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return std::exchange(last_error, cudaSuccess);
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    default:
      return "cudaError (emulated)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (error == cudaErrorLaunchFailure && !fault.empty()) return fault.c_str();
  return cudaGetErrorName(error);
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (RefusedInCapture()) return cudaErrorStreamCaptureUnsupported;
  auto* block = static_cast<unsigned char*>(std::malloc(bytes + 2 * kGuard));
  if (block == nullptr) return last_error = cudaErrorMemoryAllocation;
  std::memset(block, kGuardByte, kGuard);
  std::memset(block + kGuard, 0xff, bytes);  // NaN in every float type
  std::memset(block + kGuard + bytes, kGuardByte, kGuard);
  *p = block + kGuard;
  device[reinterpret_cast<uintptr_t>(*p)] = {bytes, block};
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (p == nullptr) return cudaSuccess;
  if (RefusedInCapture()) return cudaErrorStreamCaptureUnsupported;
  DrainAll();  // cudaFree synchronizes the device
  CheckGuards();
  auto it = device.find(reinterpret_cast<uintptr_t>(p));
  if (it == device.end()) return Fail(cudaErrorInvalidValue, "cudaFree of a pointer not allocated");
  std::free(it->second.block);
  device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (*p == nullptr) return last_error = cudaErrorMemoryAllocation;
  pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (p == nullptr) return cudaSuccess;
  DrainAll();  // no queued copy may read it afterwards
  if (pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0)
    return Fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer not from cudaHostAlloc");
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* p) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  DrainAll();
  if (pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0)
    return last_error = cudaErrorHostMemoryNotRegistered;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  *attributes = {};
  if (DeviceRange(p, 1) != nullptr) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(p);
  } else if (PinnedRange(p, 1)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(p);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  CUstream_st* s = Stream(stream);
  const bool dst_device = DeviceRange(dst, bytes) != nullptr;
  const bool src_device = DeviceRange(src, bytes) != nullptr;
  const bool ok = kind == cudaMemcpyHostToDevice   ? dst_device && !src_device
                  : kind == cudaMemcpyDeviceToHost ? src_device && !dst_device
                  : kind == cudaMemcpyDeviceToDevice ? src_device && dst_device
                                                      : false;
  if (!ok) {
    return Fail(cudaErrorInvalidValue, "cudaMemcpyAsync of " + std::to_string(bytes) +
                                           " bytes: the pointers do not match the copy's kind "
                                           "or lie outside their allocations");
  }
  const void* host = kind == cudaMemcpyHostToDevice ? src : dst;
  const bool pageable = kind != cudaMemcpyDeviceToDevice && !PinnedRange(host, bytes);
  if (pageable && s->capturing) {
    s->capture_invalid = true;
    return last_error = cudaErrorStreamCaptureUnsupported;
  }
  if (pageable && kind == cudaMemcpyHostToDevice) {
    // The source is staged before the call returns: the caller may reuse it at once.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    Enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  Enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  if (pageable) Drain(s);  // device to pageable host memory returns when done
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (DeviceRange(p, bytes) == nullptr)
    return Fail(cudaErrorInvalidValue, "cudaMemsetAsync outside a device allocation");
  Enqueue(Stream(stream), [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  *stream = new CUstream_st;
  streams.push_back(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Drain(stream);
  std::erase(streams, stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (RefusedInCapture()) return cudaErrorStreamCaptureUnsupported;
  Drain(Stream(stream));
  return Synchronized();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  const int64_t record = event->recorded;  // the record current at the call
  Enqueue(Stream(stream), [event, record] { DrainEvent(event, record); });
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  CUstream_st* s = Stream(stream);
  if (s->capturing || capturing != nullptr) return last_error = cudaErrorIllegalState;
  s->capturing = true;
  s->capture_invalid = false;
  s->captured.clear();
  capturing = s;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  CUstream_st* s = Stream(stream);
  if (!s->capturing) return last_error = cudaErrorIllegalState;
  s->capturing = false;
  capturing = nullptr;
  *graph = nullptr;
  if (s->capture_invalid) return last_error = cudaErrorStreamCaptureInvalidated;
  *graph = new CUgraph_st{std::move(s->captured)};
  s->captured.clear();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Enqueue(Stream(stream), [exec] {
    for (const auto& op : exec->ops) RunOp(op);
  });
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  DrainAll();  // a queued launch may still refer to it
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st;
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  DrainAll();
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  CUstream_st* s = Stream(stream);
  const int64_t record = ++event->recorded;
  event->stream = s;
  Enqueue(s, [event, record] {
    event->completed = record;
    event->ms = NowMs();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (RefusedInCapture()) return cudaErrorStreamCaptureUnsupported;
  DrainEvent(event, event->recorded);
  return Synchronized();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (!start->timing || !end->timing) return last_error = cudaErrorInvalidResourceHandle;
  if (start->recorded == 0 || end->recorded == 0 || start->completed < start->recorded ||
      end->completed < end->recorded)
    return last_error = cudaErrorNotReady;
  *ms = static_cast<float>(end->ms - start->ms);
  return cudaSuccess;
}

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
  *found = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const std::string problem = Validate(*Desc(desc), *Layout(a), *Layout(b), *Layout(c), *Layout(d));
  if (!problem.empty()) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    Fault("cublasLtMatmulAlgoGetHeuristic: " + problem);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  results[0] = {};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a_ptr, cublasLtMatrixLayout_t a_layout, const void* b_ptr,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c_ptr,
                              cublasLtMatrixLayout_t c_layout, void* d_ptr,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t*, void*,
                              size_t, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
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

#include "trainer/cuda_util.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace sluice::trainer {

Status CudaError(cudaError_t error, const char* expr, const char* file, int line) {
  const StatusCode code =
      error == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, fmt::format("{}:{}: {} failed: {} ({})", file, line, expr,
                                  cudaGetErrorName(error), cudaGetErrorString(error)));
}

Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line) {
  return Internal(fmt::format("{}:{}: {} failed: cuBLAS status {}", file, line, expr,
                              static_cast<int>(status)));
}

int CudaDeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Clear the error so a later, unrelated runtime call does not report it.
    (void)cudaGetLastError();
    if (reason != nullptr) *reason = cudaGetErrorString(error);
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "no CUDA device is visible";
  return count;
}

Result<CudaStream> CudaStream::Create() {
  CudaStream s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
  return s;
}
CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
  if (this != &o) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}
CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Result<CudaEvent> CudaEvent::Create(bool timing) {
  CudaEvent e;
  CUDA_CHECK(
      cudaEventCreateWithFlags(&e.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}
CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

template <CudaMemoryKind kKind>
Result<CudaMemory<kKind>> CudaMemory<kKind>::Allocate(size_t bytes) {
  CudaMemory b;
  if (bytes == 0) return b;
  if constexpr (kKind == CudaMemoryKind::kDevice) {
    CUDA_CHECK(cudaMalloc(&b.data_, bytes));
  } else {
    CUDA_CHECK(cudaHostAlloc(&b.data_, bytes, cudaHostAllocDefault));
  }
  b.bytes_ = bytes;
  return b;
}

template <CudaMemoryKind kKind>
void CudaMemory<kKind>::Free() {
  if (data_ == nullptr) return;
  if constexpr (kKind == CudaMemoryKind::kDevice) {
    cudaFree(data_);
  } else {
    cudaFreeHost(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

template class CudaMemory<CudaMemoryKind::kDevice>;
template class CudaMemory<CudaMemoryKind::kPinned>;

Result<CublasLtHandle> CublasLtHandle::Create() {
  CublasLtHandle h;
  CUBLAS_CHECK(cublasLtCreate(&h.handle_));
  return h;
}
CublasLtHandle& CublasLtHandle::operator=(CublasLtHandle&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    handle_ = std::exchange(o.handle_, nullptr);
  }
  return *this;
}
CublasLtHandle::~CublasLtHandle() {
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void CudaGraph::Reset() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}
CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    Reset();
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}
CudaGraph::~CudaGraph() { Reset(); }

Status CudaGraph::EndCapture(cudaStream_t stream) {
  Reset();
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  return Status::OK();
}

Status CudaGraph::Launch(cudaStream_t stream) const {
  if (exec_ == nullptr) return FailedPrecondition("CUDA graph launched before it was captured");
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  return Status::OK();
}

std::mutex& CaptureMutex() {
  static std::mutex mu;
  return mu;
}

PinnedAllocator::~PinnedAllocator() {
  std::lock_guard<std::mutex> capture(CaptureMutex());
  for (const auto& [bytes, p] : pool_) cudaFreeHost(p);
}

Result<void*> PinnedAllocator::Allocate(size_t bytes) {
  std::vector<void*> smaller;  // pooled buffers too small for this request or any smaller one
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = pool_.lower_bound(bytes);
    if (it != pool_.end()) {
      void* p = it->second;
      pooled_bytes_ -= it->first;
      pool_.erase(it);
      return p;
    }
    // A miss: every pooled buffer is smaller than `bytes`. Given back with the new one's
    // allocation, so that a client that grows a buffer (free, then allocate larger) does not
    // strand the old one.
    for (const auto& [capacity, p] : pool_) smaller.push_back(p);
    pool_.clear();
    pooled_bytes_ = 0;
  }
  void* p = nullptr;
  cudaError_t e;
  {
    // Held, no capture is in progress: cudaFreeHost's device synchronization cannot break one.
    std::lock_guard<std::mutex> capture(CaptureMutex());
    for (void* q : smaller) cudaFreeHost(q);
    e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) (void)cudaGetLastError();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (void* q : smaller) {
    const auto known = capacity_.find(q);
    if (known == capacity_.end()) continue;  // never from Allocate: not counted
    allocated_bytes_ -= known->second;
    capacity_.erase(known);
  }
  if (e != cudaSuccess) {
    return ResourceExhausted(
        fmt::format("cudaHostAlloc of {} bytes: {}", bytes, cudaGetErrorString(e)));
  }
  capacity_[p] = bytes;
  allocated_bytes_ += bytes;
  return p;
}

void PinnedAllocator::Free(void* p, size_t asked) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  // The caller knows the size it asked for; a buffer reused from the pool may be larger.
  const auto known = capacity_.find(p);
  const size_t bytes = known != capacity_.end() ? known->second : asked;
  pool_.emplace(bytes, p);
  pooled_bytes_ += bytes;
}

size_t PinnedAllocator::pooled_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pooled_bytes_;
}

size_t PinnedAllocator::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_bytes_;
}

void PinnedAllocator::Adopt(void* base, size_t bytes) noexcept {
  std::lock_guard<std::mutex> capture(CaptureMutex());
  if (cudaHostRegister(base, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    (void)cudaGetLastError();  // Stage then copies through its pinned buffer
  }
}

void PinnedAllocator::Unadopt(void* base, size_t) noexcept {
  std::lock_guard<std::mutex> capture(CaptureMutex());
  if (cudaHostUnregister(base) != cudaSuccess) (void)cudaGetLastError();
}

Result<double> MeasurePinnedCopyBandwidth(size_t bytes, int copies) {
  if (bytes == 0 || copies < 1) return InvalidArgument("pinned-copy bandwidth: nothing to copy");
  ASSIGN_OR_RETURN(PinnedBuffer source, PinnedBuffer::Allocate(bytes));
  ASSIGN_OR_RETURN(DeviceBuffer target, DeviceBuffer::Allocate(bytes));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(CudaEvent begin, CudaEvent::Create(/*timing=*/true));
  ASSIGN_OR_RETURN(CudaEvent end, CudaEvent::Create(/*timing=*/true));
  std::memset(source.data(), 1, bytes);  // touched: no first-use cost inside the timing
  for (int i = 0; i < 2; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(target.data(), source.data(), bytes, cudaMemcpyHostToDevice,
                               stream.get()));
  }
  CUDA_CHECK(cudaEventRecord(begin.get(), stream.get()));
  for (int i = 0; i < copies; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(target.data(), source.data(), bytes, cudaMemcpyHostToDevice,
                               stream.get()));
  }
  CUDA_CHECK(cudaEventRecord(end.get(), stream.get()));
  CUDA_CHECK(cudaEventSynchronize(end.get()));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, begin.get(), end.get()));
  return static_cast<double>(bytes) * copies / (std::max(ms, 1e-3f) / 1000.0);
}

}  // namespace sluice::trainer

// RAII owners of CUDA runtime and cuBLASLt handles, and the CUDA_CHECK / CUBLAS_CHECK macros that
// turn their error codes into Status (file, line and the failing expression in the message).
//
// Every owner is move-only; a moved-from owner holds nothing. Destructors ignore errors (they run
// on unwinding paths and after a sticky device error, where reporting helps no one).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "client/wire/buffer_allocator.h"
#include "formats/status.h"

namespace sluice::trainer {

Status CudaError(cudaError_t error, const char* expr, const char* file, int line);
Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line);

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t _sluice_cuda_error = (expr);                                        \
    if (_sluice_cuda_error != cudaSuccess)                                                \
      return ::sluice::trainer::CudaError(_sluice_cuda_error, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                         \
    const cublasStatus_t _sluice_cublas_status = (expr);                                       \
    if (_sluice_cublas_status != CUBLAS_STATUS_SUCCESS)                                        \
      return ::sluice::trainer::CublasError(_sluice_cublas_status, #expr, __FILE__, __LINE__); \
  } while (0)

// Usable CUDA devices; 0 (never an abort) when there is no driver, the driver is older than the
// runtime, or no device is visible. The runtime is linked statically, so this needs no libcudart
// on the machine; *reason (optional) says why it is 0.
int CudaDeviceCount(std::string* reason = nullptr);

// Owns a non-blocking stream (does not synchronize with the legacy default stream).
class CudaStream {
 public:
  CudaStream() = default;
  static Result<CudaStream> Create();
  CudaStream(CudaStream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& o) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Owns an event. timing = false (the default) makes record/wait cheaper.
class CudaEvent {
 public:
  CudaEvent() = default;
  static Result<CudaEvent> Create(bool timing = false);
  CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

enum class CudaMemoryKind {
  kDevice,  // cudaMalloc: 256-byte aligned device memory
  kPinned,  // cudaHostAlloc: page-locked host memory, the source of asynchronous H2D copies
};

// Owns `bytes` of memory of one kind.
template <CudaMemoryKind kKind>
class CudaMemory {
 public:
  CudaMemory() = default;
  static Result<CudaMemory> Allocate(size_t bytes);
  CudaMemory(CudaMemory&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaMemory& operator=(CudaMemory&& o) noexcept {
    if (this != &o) {
      Free();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  ~CudaMemory() { Free(); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Free();

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaMemory<CudaMemoryKind::kDevice>;
using PinnedBuffer = CudaMemory<CudaMemoryKind::kPinned>;

// Owns a cuBLASLt handle. Thread-safety: one handle per stream of work is the simple rule.
class CublasLtHandle {
 public:
  CublasLtHandle() = default;
  static Result<CublasLtHandle> Create();
  CublasLtHandle(CublasLtHandle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  CublasLtHandle& operator=(CublasLtHandle&& o) noexcept;
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  ~CublasLtHandle();

  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// Owns an instantiated CUDA graph (and the graph it came from).
class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(CudaGraph&& o) noexcept
      : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();

  // Ends the capture begun on `stream` with cudaStreamBeginCapture and instantiates it.
  Status EndCapture(cudaStream_t stream);
  Status Launch(cudaStream_t stream) const;
  bool valid() const { return exec_ != nullptr; }

 private:
  void Reset();
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Held by the training thread while it captures a step into a CUDA Graph (CudaBackend::Enqueue),
// and by PinnedAllocator around every CUDA call it makes on a client thread: cudaHostAlloc,
// cudaFreeHost, cudaHostRegister and cudaHostUnregister (the second and last synchronize the
// device) issued by another thread during a capture invalidate it. Process-wide, as the device is.
// Held for the capture's host-side enqueueing only (no waits inside), so a client thread waits at
// most that long.
std::mutex& CaptureMutex();

// Page-locked host memory (cudaHostAlloc) for the client's batch buffers: batches are decoded
// straight into it and copied to the device from where they are (CudaBackend::Stage).
//
// Thread-safety: every call from any thread; the client frees on whichever thread drops a
// buffer's last reference (a lease released, a buffer growing, a stream torn down).
// cudaFreeHost synchronizes the device, so on such a thread during a capture it would invalidate
// the capture: Free never calls CUDA, it keeps the buffer for a later Allocate of at most its
// size. Pooled buffers go back to CUDA only under CaptureMutex(), never during a capture: on an
// Allocate that no pooled buffer fits (all of them are then smaller than the request; they are
// freed with the new one's allocation), and in the destructor.
// Bound: after a miss nothing is pooled, and a hit allocates nothing, so what is live plus what is
// pooled never exceeds the most the client ever held live at once, each buffer counted at its
// capacity (the request it was allocated for; a small request served from a larger pooled buffer
// holds all of it), give or take the buffers another thread frees while a miss allocates (pooled
// until the next miss). A client that grows a buffer (HostBuffer::Reserve frees, then allocates
// larger) thus keeps one buffer, not one per size it passed through.
class PinnedAllocator : public BufferAllocator {
 public:
  PinnedAllocator() = default;
  PinnedAllocator(const PinnedAllocator&) = delete;
  PinnedAllocator& operator=(const PinnedAllocator&) = delete;
  // Gives the pool back to CUDA (cudaFreeHost), after any capture in progress has ended.
  // REQUIRES: every buffer from Allocate was freed (HostBuffers keep their allocator alive).
  ~PinnedAllocator() override;

  // A pooled buffer of at least `bytes` (the smallest), else a new one from cudaHostAlloc, after
  // the pool (all smaller than `bytes`) is given back to CUDA.
  Result<void*> Allocate(size_t bytes) override;
  // Pools p (capacity `bytes`); no CUDA call.
  void Free(void* p, size_t bytes) noexcept override;
  // A shared-memory segment the client maps is page-locked in place (cudaHostRegister), so its
  // batches go to the device with no staging copy either; left pageable if that fails.
  // Unadopt must unregister before the client unmaps the segment, so it cannot wait for the end
  // of the run: it waits for any capture to end instead (CaptureMutex()).
  void Adopt(void* base, size_t bytes) noexcept override;
  void Unadopt(void* base, size_t bytes) noexcept override;

  // Bytes held in the pool, and allocated from CUDA (live + pooled).
  size_t pooled_bytes() const;
  size_t allocated_bytes() const;

 private:
  mutable std::mutex mu_;
  std::multimap<size_t, void*> pool_;  // GUARDED_BY(mu_): free buffers by capacity
  std::map<void*, size_t> capacity_;   // GUARDED_BY(mu_): of every buffer, live or pooled
  size_t pooled_bytes_ = 0;            // GUARDED_BY(mu_)
  size_t allocated_bytes_ = 0;         // GUARDED_BY(mu_)
};

// Host→device bandwidth of a plain loop of cudaMemcpyAsync from one page-locked buffer of `bytes`
// to the device on a stream of its own, event-timed over `copies` copies after a warm-up: the
// yardstick the trainer's ingest H2D is compared with. Bytes per second.
Result<double> MeasurePinnedCopyBandwidth(size_t bytes, int copies = 20);

}  // namespace sluice::trainer

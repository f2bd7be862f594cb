// An emulated CUDA device for tests on machines without a GPU: the CUDA runtime and cuBLASLt
// calls the trainer makes (emulated_cuda_runtime.cc, emulated_cublaslt.cc), defined over host
// memory, so that the CUDA backend and the GPU training loop (trainer/cuda_backend*.cc,
// trainer/trainer.cc) run unchanged on the CPU. This file holds the device's state and the steps
// those calls share (emulated_device.h). Linked instead of libcudart and libcublasLt into
// trainer_emulated_cuda_backend_test, which is tests/trainer/cuda_backend_test.cc built against
// it; kernels run under tests/trainer/simt_emulator.h.
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
//   capture, as a copy from pageable memory does. cudaFreeHost and cudaHostUnregister, which
//   synchronize the device, fail from any thread while any stream captures, and invalidate it.
// - cuBLASLt: column-major D = α·op(A)·op(B) + β·C with fp32 accumulation over k in order, the
//   BIAS and GELU_AUX_BIAS epilogues (GELU's tanh form, trainer/gelu.h), bf16/fp16/fp32 types.
// A fault is kept (Error()), printed once, and makes every later synchronization fail.
#include "tests/trainer/emulated_device.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/trainer/simt_emulator.h"

namespace sluice_emulated {

std::recursive_mutex mu;
std::map<uintptr_t, Allocation> device;
std::map<uintptr_t, size_t> pinned;
std::vector<CUstream_st*> streams;
CUstream_st legacy_stream;
cudaError_t last_error = cudaSuccess;
std::string fault;
thread_local CUstream_st* capturing = nullptr;

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
void Drain(CUstream_st* s, const std::function<bool()>& until) {
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

bool SynchronizesDuringCapture() {
  bool any = false;
  for (CUstream_st* s : streams) {
    if (!s->capturing) continue;
    s->capture_invalid = true;
    any = true;
  }
  return any;
}

cudaError_t Fail(cudaError_t error, const std::string& what) {
  Fault(what);
  last_error = error;
  return error;
}

namespace {

// Lets the SIMT emulator queue kernels on our streams and check their pointer arguments.
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

}  // namespace

}  // namespace sluice_emulated

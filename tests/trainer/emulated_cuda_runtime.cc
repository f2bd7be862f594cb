// The CUDA runtime calls the trainer makes, on the emulated device (emulated_device.h): memory,
// copies, streams, capture and graphs, events.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/trainer/emulated_device.h"

using sluice_emulated::capturing;
using sluice_emulated::CheckGuards;
using sluice_emulated::device;
using sluice_emulated::DeviceRange;
using sluice_emulated::Drain;
using sluice_emulated::DrainAll;
using sluice_emulated::DrainEvent;
using sluice_emulated::Enqueue;
using sluice_emulated::Fail;
using sluice_emulated::fault;
using sluice_emulated::kGuard;
using sluice_emulated::kGuardByte;
using sluice_emulated::last_error;
using sluice_emulated::mu;
using sluice_emulated::NowMs;
using sluice_emulated::pinned;
using sluice_emulated::PinnedRange;
using sluice_emulated::RefusedInCapture;
using sluice_emulated::RunOp;
using sluice_emulated::Stream;
using sluice_emulated::streams;
using sluice_emulated::Synchronized;
using sluice_emulated::SynchronizesDuringCapture;

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
  // Not last_error: that is the training thread's too here, and this error is the caller's.
  if (SynchronizesDuringCapture()) return cudaErrorStreamCaptureUnsupported;
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
  if (SynchronizesDuringCapture()) return cudaErrorStreamCaptureUnsupported;
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

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (RefusedInCapture()) return cudaErrorStreamCaptureUnsupported;
  DrainAll();
  return Synchronized();
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
  // A capture stays open a while, unlocked: other threads' calls land inside it, as they can on
  // a real device, where capturing a step takes milliseconds.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
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

}  // extern "C"

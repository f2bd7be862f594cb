// The emulated CUDA device's state and the steps its runtime (emulated_cuda_runtime.cc) and
// cuBLASLt (emulated_cublaslt.cc) calls share: device and pinned memory, streams that run their
// work lazily, capture, and the sticky fault. Defined in emulated_device.cc; the model is described
// there. Internal to trainer_emulated_cuda_backend_test.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

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

namespace sluice_emulated {

inline constexpr size_t kGuard = 256;
inline constexpr unsigned char kGuardByte = 0xA5;

struct Allocation {
  size_t bytes;
  unsigned char* block;  // kGuard + bytes + kGuard
};

// One lock for the whole emulated device: the trainer's client threads call cudaHostAlloc and
// cudaHostRegister while the training thread runs steps. It guards everything below.
extern std::recursive_mutex mu;
extern std::map<uintptr_t, Allocation> device;  // by user pointer
extern std::map<uintptr_t, size_t> pinned;      // cudaHostAlloc and cudaHostRegister ranges
extern std::vector<CUstream_st*> streams;       // live ones
extern CUstream_st legacy_stream;               // the null stream
extern cudaError_t last_error;
extern std::string fault;                    // the first fault; sticky
extern thread_local CUstream_st* capturing;  // the stream this thread captures on

double NowMs();
// Keeps the first fault and prints it once.
void Fault(const std::string& what);
// The stream `s` names: the legacy stream for null.
CUstream_st* Stream(cudaStream_t s);
// The device allocation holding [p, p + bytes), or null.
const Allocation* DeviceRange(const void* p, size_t bytes);
// Whether [p, p + bytes) lies in one pinned range.
bool PinnedRange(const void* p, size_t bytes);
// Faults on the first device allocation whose guard bytes were overwritten.
void CheckGuards();
// Runs one queued operation, turning a kernel's emulator error into a fault.
void RunOp(const std::function<void()>& op);
// Runs the stream's queued work: all of it, or until `until` returns true.
void Drain(CUstream_st* s, const std::function<bool()>& until = nullptr);
// Runs the recording stream until the event's record number `record` has run.
void DrainEvent(CUevent_st* e, int64_t record);
void DrainAll();
// What a synchronization returns: the sticky fault, after checking the guards.
cudaError_t Synchronized();
// Appends work to the stream, or to the graph being captured on it.
void Enqueue(CUstream_st* s, std::function<void()> op);
// A call the capturing thread may not make (cudaStreamCaptureModeThreadLocal): invalidates the
// capture and returns true.
bool RefusedInCapture();
// A call that synchronizes the device (cudaFreeHost, cudaHostUnregister), made on any thread:
// when some stream is capturing, invalidates every capture in progress and returns true (the
// call then fails without doing anything, as on real CUDA).
bool SynchronizesDuringCapture();
// Faults with `what` and returns `error`, which cudaGetLastError then reports.
cudaError_t Fail(cudaError_t error, const std::string& what);

// The order the kernels' blocks and threads run in from now on (sluice_simt::SetOrder; read when
// a launch runs, not when it is enqueued), for tests that show a result does not depend on it.
// Defined in emulated_kernels.cc, the one translation unit that includes the SIMT emulator.
enum class BlockOrder { kForward, kReverse, kShuffled };
void SetBlockOrder(BlockOrder order);

}  // namespace sluice_emulated

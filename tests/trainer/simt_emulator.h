// Runs CUDA kernel source on the CPU, for tests on machines without a GPU: include this header,
// then the .cu files (trainer/cuda_*kernels.cu), in one C++ translation unit built with the host
// compiler. A launch (the .cu's Launch()) runs on the calling thread — at once, or when an
// emulated device (Runtime below) runs its stream:
// - blocks one after another, in the order SetOrder() says (forward, reverse or a shuffle), so a
//   result that depends on the order blocks run in (an atomic reduction) differs between orders;
// - the threads of a block as fibers (Boost.Context) that switch only at __syncthreads() and warp
//   shuffles, so those really are barriers: every thread of the block (of the warp) must reach
//   the same one, or the launch fails with "divergent …" instead of hanging;
// - __shared__ variables are function statics (one block runs at a time), dynamic shared memory
//   a per-launch buffer of the requested size, filled with NaN bytes so reads before writes show;
// - the hardware's launch limits: block ≤ 1024 threads (x, y ≤ 1024, z ≤ 64), grid.x < 2³¹,
//   grid.y and grid.z ≤ 65535, dynamic shared memory ≤ 48 KiB unless the kernel opted in with
//   cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) (up to 227 KiB, sm_90).
// Not emulated: concurrency between blocks (atomics are plain adds), the memory model, __expf's
// reduced precision. A launch's error is kept for LastError(); later launches still run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <boost/context/fiber.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define SLUICE_SIMT_EMULATION 1

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __shared__
#define __shared__ static
#undef __constant__
#define __constant__

#define threadIdx ::sluice_simt::thread_idx
#define blockIdx ::sluice_simt::block_idx
#define blockDim ::sluice_simt::block_dim
#define gridDim ::sluice_simt::grid_dim

namespace sluice_simt {

inline uint3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;

// kShuffled: a fixed permutation (an affine map i → (a·i + c) mod n, a coprime with n) of the
// blocks of each launch and of the threads of each block.
enum class Order { kForward, kReverse, kShuffled };

namespace internal {

constexpr int kWarp = 32;
constexpr size_t kStackBytes = 64 * 1024;
// sm_90's limits (CUDA C Programming Guide, "Technical Specifications per Compute Capability").
constexpr size_t kDefaultDynamicShared = 48 * 1024;
constexpr size_t kMaxDynamicShared = 227 * 1024;
constexpr unsigned kMaxGridX = 0x7fffffffu, kMaxGridYZ = 65535;

enum class State { kRunnable, kAtBlockBarrier, kAtWarpBarrier, kDone };

// Boost.Context's stack-allocator concept over a stack the emulator owns and reuses.
struct ReusedStack {
  char* memory;
  boost::context::stack_context allocate() {
    boost::context::stack_context s;
    s.size = kStackBytes;
    s.sp = memory + kStackBytes;  // stacks grow down
    return s;
  }
  void deallocate(boost::context::stack_context&) {}
};

struct Fiber {
  std::unique_ptr<char[]> stack;
  boost::context::fiber context;            // this thread, while it is suspended
  boost::context::fiber* scheduler = nullptr;  // the scheduler, while this thread runs
  State state = State::kDone;
};

struct Emulator {
  Order order = Order::kForward;
  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel, where set.
  std::vector<std::pair<const void*, size_t>> shared_opt_in;
  std::string error;
  // The block running now.
  std::vector<Fiber> fibers;
  int current = -1;
  bool waited = false;  // a thread of this block reached a barrier or shuffle
  bool direct = false;  // threads run one after another as plain calls, without fibers
  const std::function<void()>* body = nullptr;
  std::vector<unsigned char> dynamic_shared;
  std::vector<uint64_t> warp_slots;  // one 8-byte exchange slot per thread
};

inline Emulator& Get() {
  static Emulator emulator;
  return emulator;
}

// The i-th of n (blocks or threads) to run, in the emulator's order.
inline uint64_t Nth(Order order, uint64_t i, uint64_t n) {
  switch (order) {
    case Order::kForward:
      return i;
    case Order::kReverse:
      return n - 1 - i;
    case Order::kShuffled: {
      uint64_t a = 0x9e3779b1u % n;  // a large odd multiplier, made coprime with n
      while (std::gcd(a, n) != 1) ++a;
      return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * i + n / 3) % n);
    }
  }
  return i;
}

inline size_t DynamicSharedLimit(const Emulator& e, const void* kernel) {
  for (const auto& [k, bytes] : e.shared_opt_in) {
    if (k == kernel) return std::max(bytes, kDefaultDynamicShared);
  }
  return kDefaultDynamicShared;
}

inline void SetThread(int t) {
  thread_idx.x = t % block_dim.x;
  thread_idx.y = t / block_dim.x % block_dim.y;
  thread_idx.z = t / (block_dim.x * block_dim.y);
}

// Parks the running thread in `state` until the scheduler releases it.
inline void Wait(State state) {
  Emulator& e = Get();
  if (e.direct) {
    e.error = "a barrier or shuffle in a later block of a launch whose first block had none";
    return;
  }
  e.waited = true;
  Fiber& self = e.fibers[e.current];
  self.state = state;
  boost::context::fiber& scheduler = *self.scheduler;
  scheduler = std::move(scheduler).resume();
}

// Releases one barrier if every thread concerned waits at it; false (and an error) if threads
// wait at barriers that cannot all be reached.
inline bool Release(Emulator& e) {
  const int n = static_cast<int>(e.fibers.size());
  bool released = false;
  for (int w = 0; w * kWarp < n; ++w) {
    const int begin = w * kWarp, end = std::min(n, begin + kWarp);
    int waiting = 0;
    for (int t = begin; t < end; ++t) waiting += e.fibers[t].state == State::kAtWarpBarrier;
    if (waiting == 0) continue;
    if (waiting != end - begin) {
      e.error = "divergent warp shuffle in warp " + std::to_string(w) + " of block " +
                std::to_string(block_idx.x) + ": " + std::to_string(waiting) + " of " +
                std::to_string(end - begin) + " lanes reached it";
      return false;
    }
    for (int t = begin; t < end; ++t) e.fibers[t].state = State::kRunnable;
    released = true;
  }
  if (released) return true;
  int at_barrier = 0, done = 0;
  for (const Fiber& f : e.fibers) {
    at_barrier += f.state == State::kAtBlockBarrier;
    done += f.state == State::kDone;
  }
  if (at_barrier == 0) return false;  // all done
  if (done != 0) {
    e.error = "divergent __syncthreads in block " + std::to_string(block_idx.x) + ": " +
              std::to_string(done) + " of " + std::to_string(n) + " threads returned before it";
    return false;
  }
  for (Fiber& f : e.fibers) f.state = State::kRunnable;
  return true;
}

inline void RunBlock(Emulator& e) {
  const int n = static_cast<int>(e.fibers.size());
  for (int t = 0; t < n; ++t) {
    Fiber& f = e.fibers[t];
    f.context = boost::context::fiber(
        std::allocator_arg, ReusedStack{f.stack.get()},
        [&f, &e](boost::context::fiber&& scheduler) {
          f.scheduler = &scheduler;
          (*e.body)();
          f.state = State::kDone;
          return std::move(scheduler);
        });
    f.state = State::kRunnable;
  }
  while (true) {
    for (int i = 0; i < n; ++i) {
      const int t = static_cast<int>(Nth(e.order, i, n));
      if (e.fibers[t].state != State::kRunnable) continue;
      e.current = t;
      SetThread(t);
      e.fibers[t].context = std::move(e.fibers[t].context).resume();
    }
    if (!Release(e)) break;
  }
  // Threads left waiting at a divergent barrier are unwound here.
  for (Fiber& f : e.fibers) f.context = boost::context::fiber();
}

// A block of a kernel without barriers or shuffles: each thread runs to its end in turn.
inline void RunBlockDirect(Emulator& e) {
  const int n = static_cast<int>(e.fibers.size());
  e.direct = true;
  for (int i = 0; i < n && e.error.empty(); ++i) {
    const int t = static_cast<int>(Nth(e.order, i, n));
    e.current = t;
    SetThread(t);
    (*e.body)();
  }
  e.direct = false;
}

}  // namespace internal

// Set by an emulated CUDA runtime (tests/trainer/emulated_device.cc): `enqueue` takes each launch
// for its stream (or the graph being captured on it), `is_device_pointer` says whether a kernel
// may be handed a pointer. Unset, launches run at once and pointers go unchecked.
struct Runtime {
  std::function<void(cudaStream_t, std::function<void()>)> enqueue;
  std::function<bool(const void*)> is_device_pointer;
};
inline Runtime runtime;

// Runs kernel(args...) over grid × block.
template <typename... KernelArgs, typename... Args>
void Launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  internal::Emulator& e = internal::Get();
  const size_t threads = size_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) {
    e.error = "invalid launch configuration: block " + std::to_string(block.x) + "×" +
              std::to_string(block.y) + "×" + std::to_string(block.z);
    return;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > internal::kMaxGridX ||
      grid.y > internal::kMaxGridYZ || grid.z > internal::kMaxGridYZ) {
    e.error = "invalid launch configuration: grid " + std::to_string(grid.x) + "×" +
              std::to_string(grid.y) + "×" + std::to_string(grid.z);
    return;
  }
  const size_t shared_limit =
      internal::DynamicSharedLimit(e, reinterpret_cast<const void*>(kernel));
  if (shared_bytes > shared_limit) {
    e.error = "dynamic shared memory " + std::to_string(shared_bytes) + " B over the kernel's " +
              std::to_string(shared_limit) + " B (over 48 KiB needs " +
              "cudaFuncAttributeMaxDynamicSharedMemorySize)";
    return;
  }
  // Arguments are copied as a real launch copies them into its parameter buffer.
  auto copy = std::make_tuple(std::decay_t<KernelArgs>(args)...);
  if (runtime.is_device_pointer) {
    std::string bad;
    int index = 0;
    auto check = [&](const auto& arg) {
      if constexpr (std::is_pointer_v<std::decay_t<decltype(arg)>>) {
        if (arg != nullptr && bad.empty() && !runtime.is_device_pointer(arg))
          bad = "kernel argument " + std::to_string(index) + " is not device memory";
      }
      ++index;
    };
    std::apply([&](const auto&... arg) { (check(arg), ...); }, copy);
    if (!bad.empty()) {
      e.error = bad;
      return;
    }
  }
  auto run = [kernel, copy, grid, block, shared_bytes, threads] {
    internal::Emulator& e = internal::Get();
    const std::function<void()> body = [&] { std::apply(kernel, copy); };
    e.body = &body;
    if (e.fibers.size() != threads) {
      e.fibers.resize(threads);
      for (internal::Fiber& f : e.fibers) {
        if (!f.stack) f.stack = std::make_unique<char[]>(internal::kStackBytes);
      }
    }
    e.warp_slots.assign(threads, 0);
    block_dim = block;
    grid_dim = grid;
    const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
    // When the first block's threads reach no barrier or shuffle, the others run without fibers
    // (much faster; a later block that does reach one fails the launch).
    bool fibers = true;
    for (uint64_t i = 0; i < blocks; ++i) {
      const uint64_t b = internal::Nth(e.order, i, blocks);
      block_idx.x = static_cast<unsigned>(b % grid.x);
      block_idx.y = static_cast<unsigned>(b / grid.x % grid.y);
      block_idx.z = static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y));
      e.dynamic_shared.assign(shared_bytes, 0xff);
      if (fibers) {
        e.waited = false;
        internal::RunBlock(e);
        fibers = e.waited;
      } else {
        internal::RunBlockDirect(e);
      }
      if (!e.error.empty()) break;
    }
    e.body = nullptr;
  };
  if (runtime.enqueue) {
    runtime.enqueue(stream, std::move(run));
  } else {
    run();
  }
}

template <typename T>
T* DynamicShared() {
  return reinterpret_cast<T*>(internal::Get().dynamic_shared.data());
}

inline void SetOrder(Order order) { internal::Get().order = order; }
// The first error since the last ClearError(); empty when none.
inline const std::string& LastError() { return internal::Get().error; }
inline void ClearError() { internal::Get().error.clear(); }

}  // namespace sluice_simt

// Device intrinsics the kernels use, for the host compiler.
inline void __syncthreads() {
  sluice_simt::internal::Wait(sluice_simt::internal::State::kAtBlockBarrier);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  namespace in = sluice_simt::internal;
  in::Emulator& e = in::Get();
  if (mask != 0xffffffffu || width != 32) e.error = "__shfl_xor_sync: partial warps not emulated";
  const int self = e.current;
  std::memcpy(&e.warp_slots[self], &value, sizeof(T));
  in::Wait(in::State::kAtWarpBarrier);  // every lane has written
  const int partner = (self / 32) * 32 + ((self % 32) ^ lane_mask);
  T out;
  std::memcpy(&out, &e.warp_slots[partner], sizeof(T));
  in::Wait(in::State::kAtWarpBarrier);  // every lane has read
  return out;
}

inline float atomicAdd(float* address, float value) {
  const float old = *address;
  *address = old + value;
  return old;
}
inline double atomicAdd(double* address, double value) {
  const double old = *address;
  *address = old + value;
  return old;
}

// The opt-in to more than 48 KiB of dynamic shared memory, kept per kernel for Launch(); values
// over the hardware's 227 KiB fail as the real call does. Other attributes are accepted unchecked.
template <typename... KernelArgs>
cudaError_t cudaFuncSetAttribute(void (*kernel)(KernelArgs...), cudaFuncAttribute attribute,
                                 int value) {
  namespace in = sluice_simt::internal;
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || size_t(value) > in::kMaxDynamicShared) return cudaErrorInvalidValue;
  auto& opt_in = in::Get().shared_opt_in;
  const void* key = reinterpret_cast<const void*>(kernel);
  for (auto& [k, bytes] : opt_in) {
    if (k == key) {
      bytes = size_t(value);
      return cudaSuccess;
    }
  }
  opt_in.emplace_back(key, size_t(value));
  return cudaSuccess;
}

using std::isfinite;
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

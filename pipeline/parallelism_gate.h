// An adjustable counting limit on the threads inside a section: the knob on decode parallelism
// that the autotuner (pipeline/autotuner.h) turns. A thread over the limit waits in Acquire(),
// using no CPU, so lowering the limit gives cores back to the rest of the process.
#pragma once

#include <condition_variable>
#include <mutex>

namespace sluice {

// Thread-safe.
class ParallelismGate {
 public:
  // The limit starts at max (at least 1).
  explicit ParallelismGate(int max);

  ParallelismGate(const ParallelismGate&) = delete;
  ParallelismGate& operator=(const ParallelismGate&) = delete;

  // Blocks while limit() threads are inside. A holder must not wait for anything that another
  // thread waiting here would have to do, or lowering the limit could deadlock.
  void Acquire();
  void Release();

  // Clamped to [1, max]. Lowering lets threads already inside finish; raising wakes waiters.
  void SetLimit(int limit);
  int limit() const;
  int max() const { return max_; }

 private:
  const int max_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int limit_;       // guarded by mu_
  int inside_ = 0;  // guarded by mu_
  int waiting_ = 0; // guarded by mu_
};

// Holds a gate for its scope.
class GatePass {
 public:
  explicit GatePass(ParallelismGate& gate) : gate_(gate) { gate_.Acquire(); }
  ~GatePass() { gate_.Release(); }
  GatePass(const GatePass&) = delete;
  GatePass& operator=(const GatePass&) = delete;

 private:
  ParallelismGate& gate_;
};

}  // namespace sluice

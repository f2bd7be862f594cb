// Run-time tuning of decode parallelism, by hill climbing as tf.data's autotune does: every
// interval (~150 ms) the limit on decode threads (a ParallelismGate, between 1 and `threads`)
// moves one step toward where the pipeline just keeps up with its consumer.
//  - The consumer waited for batches and decode was saturated: raise the limit (by one; doubled
//    when the consumer waited most of the interval, so a large machine recovers quickly).
//  - The prefetch queue stayed full for the whole interval and the consumer never waited: the
//    consumer is the bottleneck, so lower the limit by one, giving a core back to it (a trainer
//    or the gRPC server in the same process) instead of decoding ahead in bursts.
//  - Otherwise keep it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "pipeline/parallelism_gate.h"
#include "pipeline/stats.h"

namespace sluice {

// What one interval showed.
struct AutotuneObservation {
  int64_t interval_ns = 0;
  int64_t consumer_starved_ns = 0;  // the consumer's waiting in GetNext
  int64_t decode_busy_ns = 0;       // decode work, summed over threads
  // Samples of the prefetch queue taken during the interval: all of them, those at or above its
  // capacity, and those empty (how a consumer that never blocks, such as one polling with
  // TryGetNext, shows that it is waiting).
  int samples = 0;
  int samples_full = 0;
  int samples_empty = 0;
};

// The next limit, in [1, max], for a gate now at `limit`. Pure; see the file comment.
int NextDecodeLimit(int limit, int max, const AutotuneObservation& o);

// Samples the pipeline's stats on its own thread and sets the gate's limit, mirrored in
// stats->decode_parallelism. stats and gate must outlive it; the destructor stops and joins the
// thread.
class DecodeAutotuner {
 public:
  struct Options {
    std::chrono::milliseconds sample_period{25};
    int samples_per_step = 6;  // a step every 150 ms
  };

  DecodeAutotuner(PipelineStats* stats, ParallelismGate* gate, Options options);
  ~DecodeAutotuner();

  DecodeAutotuner(const DecodeAutotuner&) = delete;
  DecodeAutotuner& operator=(const DecodeAutotuner&) = delete;

 private:
  void Run();

  PipelineStats* const stats_;
  ParallelismGate* const gate_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace sluice

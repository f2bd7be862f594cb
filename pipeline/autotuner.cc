#include "pipeline/autotuner.h"

#include <algorithm>

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// The consumer "waited" when it spent more than this share of the interval in GetNext (a few
// microseconds per call are lock and hand-over, not waiting), or found the queue empty in at
// least half the samples.
constexpr int64_t kWaitedShare = 50;        // 1/50 = 2%
// It "never waited" below this share: a step down needs a consumer that always found a batch.
constexpr int64_t kNeverWaitedShare = 100;  // 1/100 = 1%
// Decode is saturated when its threads were busy this share of limit x interval: below that,
// more threads would find no work (the reader, not decode, is what the consumer waits for).
constexpr double kSaturatedShare = 0.75;

}  // namespace

int NextDecodeLimit(int limit, int max, const AutotuneObservation& o) {
  max = std::max(1, max);
  limit = std::clamp(limit, 1, max);
  if (o.interval_ns <= 0 || o.samples <= 0) return limit;
  const bool waited = o.consumer_starved_ns > o.interval_ns / kWaitedShare ||
                      2 * o.samples_empty >= o.samples;
  const bool saturated = static_cast<double>(o.decode_busy_ns) >=
                         kSaturatedShare * static_cast<double>(limit) *
                             static_cast<double>(o.interval_ns);
  if (waited && saturated) {
    const bool mostly_waiting =
        2 * o.consumer_starved_ns > o.interval_ns || o.samples_empty == o.samples;
    return std::min(max, limit + (mostly_waiting ? limit : 1));
  }
  const bool never_waited =
      o.consumer_starved_ns <= o.interval_ns / kNeverWaitedShare && o.samples_empty == 0;
  if (never_waited && o.samples_full == o.samples) return std::max(1, limit - 1);
  return limit;
}

DecodeAutotuner::DecodeAutotuner(PipelineStats* stats, ParallelismGate* gate, Options options)
    : stats_(stats), gate_(gate), options_(options) {
  stats_->decode_parallelism = gate_->limit();
  thread_ = std::thread([this] { Run(); });
}

DecodeAutotuner::~DecodeAutotuner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DecodeAutotuner::Run() {
  StageCounters& consumer = stats_->stage(Stage::kConsumer);
  StageCounters& decode = stats_->stage(Stage::kDecode);
  const int capacity = std::max(1, stats_->queue_capacity);
  AutotuneObservation o;
  Clock::time_point start = Clock::now();
  int64_t starved = consumer.starved_ns.load();
  int64_t busy = decode.busy_ns.load();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, options_.sample_period, [this] { return stop_; })) return;
    const int fill = stats_->queue_fill.load(std::memory_order_relaxed);
    ++o.samples;
    o.samples_full += fill >= capacity;
    o.samples_empty += fill == 0;
    if (o.samples < options_.samples_per_step) continue;

    const Clock::time_point now = Clock::now();
    const int64_t starved_now = consumer.starved_ns.load();
    const int64_t busy_now = decode.busy_ns.load();
    o.interval_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count();
    o.consumer_starved_ns = starved_now - starved;
    o.decode_busy_ns = busy_now - busy;
    const int limit = gate_->limit();
    const int next = NextDecodeLimit(limit, gate_->max(), o);
    if (next != limit) {
      gate_->SetLimit(next);
      stats_->decode_parallelism = next;
    }
    o = AutotuneObservation{};
    start = now;
    starved = starved_now;
    busy = busy_now;
  }
}

}  // namespace sluice

// Live counters of a pipeline, per stage and per memory pool. Written by the stages with relaxed
// atomics (cheap on the hot path), read at any time by Snapshot() for profile, /metrics and
// GetStats.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace sluice {

// One stage of the graph. busy = time spent doing its work, summed over its threads; idle_starved
// = time its threads waited for input; idle_blocked = time they waited for room downstream.
struct StageCounters {
  std::atomic<uint64_t> items{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int64_t> busy_ns{0};
  std::atomic<int64_t> starved_ns{0};
  std::atomic<int64_t> blocked_ns{0};
  std::atomic<int> active{0};  // threads in the stage right now
  std::atomic<int> max_active{0};

  void Enter() {
    int now = active.fetch_add(1, std::memory_order_relaxed) + 1;
    int seen = max_active.load(std::memory_order_relaxed);
    while (now > seen && !max_active.compare_exchange_weak(seen, now)) {
    }
  }
  void Leave(int64_t ns) {
    active.fetch_sub(1, std::memory_order_relaxed);
    busy_ns.fetch_add(ns, std::memory_order_relaxed);
  }
};

// Bytes held by one pool against its bound.
struct PoolCounters {
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> items{0};
  int64_t limit = 0;  // 0: bounded by item count, not bytes

  void Add(int64_t b, int64_t n = 1) {
    int64_t now = bytes.fetch_add(b, std::memory_order_relaxed) + b;
    items.fetch_add(n, std::memory_order_relaxed);
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  void Remove(int64_t b, int64_t n = 1) {
    bytes.fetch_sub(b, std::memory_order_relaxed);
    items.fetch_sub(n, std::memory_order_relaxed);
  }
};

enum class Stage { kRead, kShuffle, kDecode, kBatch, kConsumer, kCount };
// kDecode: what the decode threads have reserved for images being decoded (DecodeBudget).
enum class Pool { kReadBuffers, kRecordsInFlight, kShuffleBuffer, kRecordCache, kDecodedCache,
                  kBatchPool, kDecode, kCount };

std::string_view StageName(Stage s);
std::string_view PoolName(Pool p);

struct StageSnapshot {
  std::string name;
  uint64_t items = 0;
  uint64_t bytes = 0;
  double busy_seconds = 0;
  double starved_seconds = 0;
  double blocked_seconds = 0;
  int max_parallelism = 0;
};

struct PoolSnapshot {
  std::string name;
  int64_t bytes = 0;
  int64_t peak_bytes = 0;
  int64_t items = 0;
  int64_t limit_bytes = 0;
};

struct StatsSnapshot {
  double wall_seconds = 0;
  uint64_t batches = 0;
  uint64_t images = 0;
  uint64_t image_bytes = 0;
  uint64_t skipped = 0;       // corrupt records + undecodable images, skipped
  uint64_t index_fallbacks = 0;  // record indexes found lying, the file read instead
  uint64_t shuffle_capped = 0;   // records the shuffle emitted early: its byte share was full
  uint64_t dropped_records = 0;  // equal shares: usable records after an epoch's equal batches
  uint64_t padded_samples = 0;   // equal shares: repeated samples that filled an epoch's batches
  uint64_t jpeg_decodes = 0;
  uint64_t png_decodes = 0;
  uint64_t webp_decodes = 0;
  uint64_t boxes_dropped = 0;
  uint64_t epochs_done = 0;
  bool cache_full = false;    // the cache stopped growing at its budget
  int64_t cache_entries = 0;
  int threads = 0;
  // Decode threads allowed to work right now (the autotuner's choice), and its upper bound.
  int decode_parallelism = 0;
  int decode_parallelism_max = 0;
  int queue_fill = 0;         // ready batches waiting for the consumer
  int queue_capacity = 0;
  std::vector<StageSnapshot> stages;
  std::vector<PoolSnapshot> pools;
  std::vector<std::string> recent_errors;
};

class PipelineStats {
 public:
  PipelineStats();

  StageCounters& stage(Stage s) { return stages_[static_cast<int>(s)]; }
  PoolCounters& pool(Pool p) { return pools_[static_cast<int>(p)]; }

  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> images{0};
  std::atomic<uint64_t> image_bytes{0};
  std::atomic<uint64_t> skipped{0};
  std::atomic<uint64_t> index_fallbacks{0};
  std::atomic<uint64_t> shuffle_capped{0};
  std::atomic<uint64_t> dropped_records{0};
  std::atomic<uint64_t> padded_samples{0};
  std::atomic<uint64_t> jpeg_decodes{0};  // JPEGs decoded (decoded-cache hits are not)
  std::atomic<uint64_t> png_decodes{0};   // PNGs decoded (likewise)
  std::atomic<uint64_t> webp_decodes{0};  // WebPs decoded (likewise)
  // Boxes the crops left too little of (BoxOptions min_overlap, min_size):
  // pipeline/box_transform.h.
  std::atomic<uint64_t> boxes_dropped{0};
  std::atomic<uint64_t> epochs_done{0};
  std::atomic<bool> cache_full{false};
  std::atomic<int64_t> cache_entries{0};
  std::atomic<int> queue_fill{0};
  int queue_capacity = 0;
  int threads = 0;
  std::atomic<int> decode_parallelism{0};
  int decode_parallelism_max = 0;

  void AddError(std::string message);  // keeps the last few for display
  // Writes "sluice: WARNING: <line>" to stderr: the one way the pipeline warns. Any thread.
  void Warn(const std::string& line) const;
  // Warn, unless this pipeline warned this very line before: a doubt about a file once, not once
  // an epoch. Any thread.
  void WarnOnce(const std::string& line);
  // Set by the first label out of [0, num_classes) of the run: it is warned of once.
  std::atomic<bool> label_range_warned{false};
  StatsSnapshot Snapshot() const;

 private:
  const std::chrono::steady_clock::time_point start_;
  StageCounters stages_[static_cast<int>(Stage::kCount)];
  PoolCounters pools_[static_cast<int>(Pool::kCount)];
  mutable std::mutex errors_mu_;
  std::vector<std::string> errors_;  // guarded by errors_mu_
  std::mutex warned_mu_;
  std::set<std::string> warned_;  // lines WarnOnce wrote, at most one a file; guarded by warned_mu_
};

// Times a scope into a stage's busy time.
class StageTimer {
 public:
  explicit StageTimer(StageCounters& c) : c_(c), start_(std::chrono::steady_clock::now()) {
    c_.Enter();
  }
  ~StageTimer() {
    c_.Leave(std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now() - start_).count());
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  StageCounters& c_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace sluice

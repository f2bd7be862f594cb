#include "pipeline/stats.h"

#include <cstdio>

namespace sluice {
namespace {
constexpr size_t kErrorsKept = 16;
double Seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }
}  // namespace

std::string_view StageName(Stage s) {
  switch (s) {
    case Stage::kRead: return "read";
    case Stage::kShuffle: return "shuffle";
    case Stage::kDecode: return "decode";
    case Stage::kBatch: return "batch";
    case Stage::kConsumer: return "consumer";
    case Stage::kCount: break;
  }
  return "?";
}

std::string_view PoolName(Pool p) {
  switch (p) {
    case Pool::kReadBuffers: return "read_buffers";
    case Pool::kRecordsInFlight: return "records_in_flight";
    case Pool::kShuffleBuffer: return "shuffle_buffer";
    case Pool::kRecordCache: return "record_cache";
    case Pool::kDecodedCache: return "decoded_cache";
    case Pool::kBatchPool: return "batch_pool";
    case Pool::kDecode: return "decode";
    case Pool::kCount: break;
  }
  return "?";
}

PipelineStats::PipelineStats() : start_(std::chrono::steady_clock::now()) {}

void PipelineStats::Warn(const std::string& line) const {
  std::fprintf(stderr, "sluice: WARNING: %s\n", line.c_str());
}

void PipelineStats::WarnOnce(const std::string& line) {
  {
    std::lock_guard<std::mutex> lock(warned_mu_);
    if (!warned_.insert(line).second) return;
  }
  Warn(line);
}

void PipelineStats::AddError(std::string message) {
  std::lock_guard<std::mutex> lock(errors_mu_);
  if (errors_.size() == kErrorsKept) errors_.erase(errors_.begin());
  errors_.push_back(std::move(message));
}

StatsSnapshot PipelineStats::Snapshot() const {
  StatsSnapshot s;
  s.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.batches = batches.load();
  s.images = images.load();
  s.image_bytes = image_bytes.load();
  s.skipped = skipped.load();
  s.index_fallbacks = index_fallbacks.load();
  s.shuffle_capped = shuffle_capped.load();
  s.dropped_records = dropped_records.load();
  s.padded_samples = padded_samples.load();
  s.jpeg_decodes = jpeg_decodes.load();
  s.png_decodes = png_decodes.load();
  s.webp_decodes = webp_decodes.load();
  s.boxes_dropped = boxes_dropped.load();
  s.epochs_done = epochs_done.load();
  s.cache_full = cache_full.load();
  s.cache_entries = cache_entries.load();
  s.threads = threads;
  s.decode_parallelism = decode_parallelism.load();
  s.decode_parallelism_max = decode_parallelism_max;
  s.queue_fill = queue_fill.load();
  s.queue_capacity = queue_capacity;
  for (int i = 0; i < static_cast<int>(Stage::kCount); ++i) {
    const StageCounters& c = stages_[i];
    s.stages.push_back({std::string(StageName(static_cast<Stage>(i))), c.items.load(),
                        c.bytes.load(), Seconds(c.busy_ns.load()), Seconds(c.starved_ns.load()),
                        Seconds(c.blocked_ns.load()), c.max_active.load()});
  }
  for (int i = 0; i < static_cast<int>(Pool::kCount); ++i) {
    const PoolCounters& p = pools_[i];
    s.pools.push_back({std::string(PoolName(static_cast<Pool>(i))), p.bytes.load(), p.peak.load(),
                       p.items.load(), p.limit});
  }
  std::lock_guard<std::mutex> lock(errors_mu_);
  s.recent_errors = errors_;
  return s;
}

}  // namespace sluice

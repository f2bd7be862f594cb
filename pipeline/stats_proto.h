// The wire form of a pipeline's statistics (sluice.v1.JobStats, StageStats, PoolStats in
// proto/sluice/v1/service.proto) made from StatsSnapshot and back. The correspondence of fields is
// one table of (proto field name, snapshot member) per message, applied through protobuf
// reflection, so a figure added to both is added to the table once and GetStats, /metrics and both
// profilers see it. Not on a hot path: a snapshot is converted once per GetStats or scrape.
#pragma once

#include "pipeline/stats.h"
#include "sluice/v1/service.pb.h"

namespace sluice {

// Fills every JobStats field a snapshot holds (counters, queue, decode parallelism, stages, pools)
// and images_per_sec; leaves name, dataset, consumers and memory_budget_bytes, which belong to the
// job, not the pipeline. Appends to stages and pools.
void FillJobStats(const StatsSnapshot& snapshot, v1::JobStats* out);

// The snapshot `stats` was filled from, as far as the wire carries it: PoolSnapshot::items and the
// fields JobStats lacks (jpeg_decodes, epochs_done, cache state, threads, image_bytes, recent
// errors) stay zero or empty.
StatsSnapshot SnapshotFromJobStats(const v1::JobStats& stats);

}  // namespace sluice

// How many batches each epoch of a sharded stream yields so that every consumer of the data set
// gets the same number (EqualShares, config.proto): from every file's record count
// (pipeline/record_counts.h) and the rule that gives each shard its records (PlanSharding), the
// records of every shard of shard_count; DROP takes floor(smallest / batch_size) batches, PAD
// ceil(largest / batch_size). A shared job's consumers in lockstep (job_consumers N > 0) take
// batch i of an epoch each i mod N, so the epoch's batches are rounded to a multiple of N as
// well: DROP down, PAD up (whole batches of padding). Off, or unsharded and not in lockstep, an
// epoch has as many batches as its records fill (the last partial, or dropped with
// drop_remainder).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/status.h"
#include "pipeline/options.h"
#include "pipeline/record_counts.h"

namespace sluice {

struct SharePlan {
  // As it acts: kOff when unsharded and not in lockstep.
  EqualShares equal_shares = EqualShares::kOff;
  int64_t records_per_epoch = 0;  // this shard's, skipped ones included
  int64_t min_shard_records = 0;
  int64_t max_shard_records = 0;
  int smallest_shard = 0;  // a peer holding min_shard_records (0 when unsharded)
  // The pipeline's (a job in lockstep: the whole job's, batches_per_epoch / job_consumers for
  // each consumer).
  int64_t batches_per_epoch = 0;
};

// The records each shard of options.shard_count reads per epoch (all of them when unsharded).
// REQUIRES: counts[i] is options.files[i]'s.
std::vector<int64_t> ShardRecords(const ResolvedOptions& options,
                                  const std::vector<FileRecords>& counts);

// The indexes into options.files that this stream's peers read (the shards congruent to its own
// modulo shard_count / shard_consumers, ResolvedOptions::shard_consumers): all that PlanShares
// needs counted. Every file when the plan shards records, or when unsharded.
std::vector<bool> PeerFiles(const ResolvedOptions& options);

// REQUIRES: counts[i] is options.files[i]'s for every file PeerFiles names (the others' counts
// only change ShardRecords of shards that are not peers, which the plan does not use).
SharePlan PlanShares(const ResolvedOptions& options, const std::vector<FileRecords>& counts);

// PlanShares over the counts of the files the peers read (CountRecords: cached), never the other
// parts of a fleet. FailedPrecondition, the same for every peer, when equal shares would leave a
// consumer with no batch (DROP with a shard smaller than one batch, or, in lockstep, with fewer
// full batches than consumers) or with nothing to pad from (PAD with a shard of no records),
// naming the shard, its records and batches, and the consumers.
Result<SharePlan> PlanSharesForFiles(const ResolvedOptions& options);

}  // namespace sluice

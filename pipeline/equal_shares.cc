#include "pipeline/equal_shares.h"

#include <algorithm>
#include <string>

#include "pipeline/shard_plan.h"

namespace sluice {

std::vector<int64_t> ShardRecords(const ResolvedOptions& options,
                                  const std::vector<FileRecords>& counts) {
  const int shards = std::max(1, options.shard_count);
  std::vector<int64_t> out(static_cast<size_t>(shards), 0);
  ResolvedOptions one = options;
  for (int s = 0; s < shards; ++s) {
    one.shard_index = s;
    const ShardPlan plan = PlanSharding(one);
    int64_t records = 0;
    for (uint32_t f : plan.files) {
      const FileRecords& c = counts[f];
      if (c.unreadable || plan.records.count == 1) {
        // An unreadable file is one bad record to every shard that opens it.
        records += static_cast<int64_t>(c.records);
        continue;
      }
      // Records r with r % count == index.
      const auto n = static_cast<uint64_t>(plan.records.count);
      const auto i = static_cast<uint64_t>(plan.records.index);
      records += static_cast<int64_t>(c.records / n + (i < c.records % n ? 1 : 0));
    }
    out[static_cast<size_t>(s)] = records;
  }
  return out;
}

namespace {

// This shard's peers, the consumers of its part (ResolvedOptions::shard_consumers): the shards
// first, first + stride, ... of shard_count.
struct Peers {
  int first = 0;
  int stride = 1;
};

Peers PeersOf(const ResolvedOptions& options) {
  Peers p;
  p.stride = std::max(1, options.shard_count / std::max(1, options.shard_consumers));
  p.first = options.shard_count > 1 ? options.shard_index % p.stride : 0;
  return p;
}

}  // namespace

std::vector<bool> PeerFiles(const ResolvedOptions& options) {
  std::vector<bool> needed(options.files.size(), false);
  const int shards = std::max(1, options.shard_count);
  const Peers peers = PeersOf(options);
  ResolvedOptions one = options;
  for (int s = peers.first; s < shards; s += peers.stride) {
    one.shard_index = s;
    for (uint32_t f : PlanSharding(one).files) needed[f] = true;
  }
  return needed;
}

SharePlan PlanShares(const ResolvedOptions& options, const std::vector<FileRecords>& counts) {
  const std::vector<int64_t> shards = ShardRecords(options, counts);
  SharePlan plan;
  plan.equal_shares = options.equalizes() ? options.equal_shares : EqualShares::kOff;
  plan.records_per_epoch =
      shards[static_cast<size_t>(options.shard_count > 1 ? options.shard_index : 0)];
  const Peers peers = PeersOf(options);
  plan.smallest_shard = peers.first;
  plan.min_shard_records = shards[static_cast<size_t>(peers.first)];
  plan.max_shard_records = plan.min_shard_records;
  for (size_t s = static_cast<size_t>(peers.first); s < shards.size();
       s += static_cast<size_t>(peers.stride)) {
    if (shards[s] < plan.min_shard_records) {
      plan.min_shard_records = shards[s];
      plan.smallest_shard = static_cast<int>(s);
    }
    plan.max_shard_records = std::max(plan.max_shard_records, shards[s]);
  }
  const int64_t batch = options.batch_size;
  // Every consumer in lockstep takes one batch of each round of job_consumers.
  const int64_t round = std::max(1, options.job_consumers);
  switch (plan.equal_shares) {
    case EqualShares::kDrop:
      plan.batches_per_epoch = plan.min_shard_records / batch / round * round;
      break;
    case EqualShares::kPad:
      plan.batches_per_epoch =
          ((plan.max_shard_records + batch - 1) / batch + round - 1) / round * round;
      break;
    case EqualShares::kOff:
      plan.batches_per_epoch = options.drop_remainder
                                   ? plan.records_per_epoch / batch
                                   : (plan.records_per_epoch + batch - 1) / batch;
      break;
  }
  return plan;
}

namespace {

// Why PlanSharesForFiles refuses `plan`: the smallest share's records against the batch size and,
// in lockstep, the consumers each batch of a round goes to.
std::string NoEqualShareMessage(const ResolvedOptions& options, const SharePlan& plan) {
  const bool pad = plan.equal_shares == EqualShares::kPad;
  const std::string records = std::to_string(plan.min_shard_records) + " records";
  const std::string smallest =
      options.shard_consumers > 1
          ? "shard " + std::to_string(plan.smallest_shard) + ", the smallest of the " +
                std::to_string(options.shard_consumers) + " consumers' shards, holds " + records
          : "an epoch of the job holds " + records;
  if (pad) {
    return "equal shares (PAD) leave a consumer nothing to pad from: " + smallest +
           "; use fewer shards or more files";
  }
  const int64_t full = plan.min_shard_records / options.batch_size;
  if (options.job_consumers > 0 && full > 0) {
    return "equal shares (DROP) give no batch to each of the job's " +
           std::to_string(options.job_consumers) + " consumers (num_consumers): " + smallest +
           ", " + std::to_string(full) + " full batches of batch_size " +
           std::to_string(options.batch_size) + ", fewer than its " +
           std::to_string(options.job_consumers) +
           " consumers; use a smaller batch_size, fewer consumers, or equal_shares PAD";
  }
  return "equal shares (DROP) give no batch: " + smallest + ", the largest " +
         std::to_string(plan.max_shard_records) + ", under batch_size " +
         std::to_string(options.batch_size) +
         "; use a smaller batch_size, fewer shards, or equal_shares PAD";
}

}  // namespace

Result<SharePlan> PlanSharesForFiles(const ResolvedOptions& options) {
  // Only the peers' files: a --shard I/N server does not count the fleet's other parts.
  const std::vector<bool> needed = PeerFiles(options);
  std::vector<std::string> files;
  std::vector<SourceKind> kinds;
  for (size_t f = 0; f < options.files.size(); ++f) {
    if (!needed[f]) continue;
    files.push_back(options.files[f]);
    kinds.push_back(options.kinds[f]);
  }
  const std::vector<FileRecords> counted = CountRecords(files, kinds, options.compression);
  std::vector<FileRecords> counts(options.files.size());
  for (size_t f = 0, next = 0; f < options.files.size(); ++f) {
    if (needed[f]) counts[f] = counted[next++];
  }
  const SharePlan plan = PlanShares(options, counts);
  if (plan.equal_shares == EqualShares::kOff) return plan;
  const bool pad = plan.equal_shares == EqualShares::kPad;
  // Every peer sees the same shards, so every peer is refused alike: none streams while another
  // fails (a DDP rank that dies while the others wait for it).
  if (plan.batches_per_epoch == 0 || (pad && plan.min_shard_records == 0)) {
    return FailedPrecondition(NoEqualShareMessage(options, plan));
  }
  return plan;
}

}  // namespace sluice

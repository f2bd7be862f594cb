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

SharePlan PlanShares(const ResolvedOptions& options, const std::vector<FileRecords>& counts) {
  const std::vector<int64_t> shards = ShardRecords(options, counts);
  SharePlan plan;
  plan.equal_shares = options.equalizes() ? options.equal_shares : EqualShares::kOff;
  plan.records_per_epoch =
      shards[static_cast<size_t>(options.shard_count > 1 ? options.shard_index : 0)];
  // This shard's peers: the consumers of its part (ResolvedOptions::shard_consumers).
  const int stride = std::max(1, options.shard_count / std::max(1, options.shard_consumers));
  const int first = options.shard_count > 1 ? options.shard_index % stride : 0;
  plan.min_shard_records = shards[static_cast<size_t>(first)];
  plan.max_shard_records = plan.min_shard_records;
  for (size_t s = static_cast<size_t>(first); s < shards.size(); s += static_cast<size_t>(stride)) {
    plan.min_shard_records = std::min(plan.min_shard_records, shards[s]);
    plan.max_shard_records = std::max(plan.max_shard_records, shards[s]);
  }
  const int64_t batch = options.batch_size;
  switch (plan.equal_shares) {
    case EqualShares::kDrop:
      plan.batches_per_epoch = plan.min_shard_records / batch;
      break;
    case EqualShares::kPad:
      plan.batches_per_epoch = (plan.max_shard_records + batch - 1) / batch;
      break;
    case EqualShares::kOff:
      plan.batches_per_epoch = options.drop_remainder
                                   ? plan.records_per_epoch / batch
                                   : (plan.records_per_epoch + batch - 1) / batch;
      break;
  }
  return plan;
}

Result<SharePlan> PlanSharesForFiles(const ResolvedOptions& options) {
  const SharePlan plan = PlanShares(options, CountRecords(options.files, options.compression));
  if (plan.equal_shares != EqualShares::kOff && plan.batches_per_epoch == 0) {
    return FailedPrecondition(
        "equal shares (" + std::string(plan.equal_shares == EqualShares::kDrop ? "DROP" : "PAD") +
        ") give no batch: the smallest of the " + std::to_string(options.shard_consumers) +
        " consumers' shards holds " + std::to_string(plan.min_shard_records) +
        " records, the largest " + std::to_string(plan.max_shard_records) + ", under batch_size " +
        std::to_string(options.batch_size) +
        "; use a smaller batch_size, fewer shards, or equal_shares PAD");
  }
  return plan;
}

}  // namespace sluice

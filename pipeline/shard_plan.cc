#include "pipeline/shard_plan.h"

namespace sluice {

ShardPlan PlanSharding(const ResolvedOptions& options) {
  ShardPlan plan;
  const uint32_t n = static_cast<uint32_t>(options.files.size());
  if (options.shard_count > 1 && n >= static_cast<uint32_t>(options.shard_count)) {
    // Enough files: each shard reads whole files, i ≡ index (mod count).
    for (uint32_t i = options.shard_index; i < n; i += options.shard_count) plan.files.push_back(i);
  } else {
    for (uint32_t i = 0; i < n; ++i) plan.files.push_back(i);
    plan.records = RecordShard{options.shard_index, options.shard_count};
  }
  return plan;
}

}  // namespace sluice

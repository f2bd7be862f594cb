// How one pipeline's shard of the data set is drawn from the file list ({shard_index,
// shard_count}): whole files when there are at least as many files as shards, else every
// count-th record of every file. Every worker computes the same plan from the same sorted list.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/options.h"

namespace sluice {

// Which records of a file are this pipeline's: record r is when r % count == index.
struct RecordShard {
  int index = 0;
  int count = 1;
  bool Mine(uint64_t record) const {
    return count == 1 || record % static_cast<uint64_t>(count) == static_cast<uint64_t>(index);
  }
};

struct ShardPlan {
  std::vector<uint32_t> files;  // indexes into options.files, read in every epoch
  RecordShard records;          // count > 1 only when there are fewer files than shards
};

ShardPlan PlanSharding(const ResolvedOptions& options);

}  // namespace sluice

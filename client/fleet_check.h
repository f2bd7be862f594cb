// The check a client fanning in from several servers makes before it streams a dataset: the
// servers it reaches, each serving its part of the dataset's files (`sluice serve --shard I/N`,
// ListDatasets' DatasetInfo.shard_index/shard_count), together serve all of it, each part once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"

namespace sluice {

// The part of a dataset one server serves: shard `index` of `count`; count 0 or 1 = all of it.
struct ServerShard {
  std::string target;
  int32_t index = 0;
  int32_t count = 0;
};

// REQUIRES: one entry per server reached.
// OK when every server serves all of the dataset, or when they agree on one count N > 1 and
// serve each index 0..N-1 exactly once. FailedPrecondition otherwise, naming the dataset, the part
// each target serves and what is wrong: the indexes no target serves, those served more than once,
// or counts that disagree.
Status CheckFleet(const std::string& dataset, const std::vector<ServerShard>& servers);

}  // namespace sluice

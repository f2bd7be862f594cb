// The check a client fanning in from several servers makes before it streams a dataset: the
// servers it reaches, each serving its part of the dataset's files (`sluice serve --shard I/N`,
// ListDatasets' DatasetInfo.shard_index/shard_count), together serve all of it, each part once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "sluice/v1/service.pb.h"

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

// OK when `transform_set` is "" or "default", or the server at `target`, whose DatasetInfo is
// `info`, lists it in info.transform_sets. A server that lists none predates transform sets and
// would drop StreamRequest.transform_set as an unknown field, serving uint8 NHWC batches without a
// word: FailedPrecondition. One that lists others: InvalidArgument, as that server would answer.
// Both name the set, the dataset and the target.
Status CheckTransformSet(const v1::DatasetInfo& info, const std::string& transform_set,
                         const std::string& target);

// OK when two servers' DatasetInfo of one dataset give batches of the same arrays: labels or
// none (unlabeled) and the same features (names, types, raggedness, row shapes, in order).
// FailedPrecondition naming the dataset, both targets and what each serves otherwise: a fan-in
// over them would hand one training step batches of both.
Status CheckSameArrays(const v1::DatasetInfo& first, const std::string& first_target,
                       const v1::DatasetInfo& info, const std::string& target);

}  // namespace sluice

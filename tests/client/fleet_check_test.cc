// CheckFleet: the servers a client reaches serve all of a dataset, each part once, or the error
// names the dataset, the part each target serves and what is missing or doubled. The same check
// against real `sluice serve --shard` processes is in tests/server/serve_streams_test.cc.
#include "client/fleet_check.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace sluice {
namespace {

TEST_CASE("FleetThatServesEveryShardOnceOrTheWholeDatasetPasses") {
  const std::vector<std::vector<ServerShard>> fleets = {
      {},
      {{"a:1", 0, 0}},
      {{"a:1", 0, 1}, {"b:1", 0, 0}},  // replicas of the whole dataset
      {{"a:1", 1, 2}, {"b:1", 0, 2}},
      {{"a:1", 2, 3}, {"b:1", 0, 3}, {"c:1", 1, 3}},
  };
  for (const auto& fleet : fleets) {
    INFO(fleet.size() << " servers");
    CHECK(CheckFleet("train", fleet).ok());
  }
}

TEST_CASE("FleetMissingOrDoublingAShardIsFailedPreconditionNamingIt") {
  struct Case {
    std::string name;
    std::vector<ServerShard> fleet;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"one of two",
       {{"a:1", 0, 2}},
       {"a:1 serves shard 0 of 2 of 'train'", "no target serves shard 1", "allow_partial_fleet"}},
      {"the same shard twice",
       {{"a:1", 0, 2}, {"b:1", 1, 2}, {"a:1", 0, 2}},
       {"shard 0 is served by 2 targets (a:1, a:1)"}},
      {"a run of missing shards",
       {{"a:1", 0, 8}, {"b:1", 2, 8}},
       {"no target serves shards 1, 3-7"}},
      {"counts that disagree",
       {{"a:1", 0, 2}, {"b:1", 1, 3}},
       {"a:1 serves shard 0 of 2, b:1 serves shard 1 of 3", "do not split it the same way"}},
      {"a part beside the whole",
       {{"a:1", 0, 0}, {"b:1", 1, 2}},
       {"a:1 serves all, b:1 serves shard 1 of 2", "do not split it the same way"}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Status s = CheckFleet("train", c.fleet);
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    for (const std::string& says : c.says) {
      INFO(s.message());
      CHECK(s.message().find(says) != std::string::npos);
    }
  }
}

TEST_CASE("TransformSetAskedOfAServerListingNoSetsIsRefusedAsPredatingThem") {
  v1::DatasetInfo old;  // as a server older than transform sets lists its dataset
  old.set_name("train");
  for (const std::string set : {"", "default"}) CHECK(CheckTransformSet(old, set, "old:1").ok());
  const Status s = CheckTransformSet(old, "bf16", "old:1");
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  for (const std::string want : {"'bf16'", "'train'", "old:1", "predates transform sets"}) {
    CHECK(s.message().find(want) != std::string::npos);
  }
}

TEST_CASE("TransformSetTheServerDoesNotListIsRefusedNamingWhatItOffers") {
  v1::DatasetInfo info;
  info.set_name("train");
  info.add_transform_sets()->set_name("default");
  info.add_transform_sets()->set_name("bf16");
  CHECK(CheckTransformSet(info, "bf16", "new:1").ok());
  const Status s = CheckTransformSet(info, "bf17", "new:1");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("'bf17'") != std::string::npos);
  CHECK(s.message().find("new:1, which offers: default, bf16") != std::string::npos);
}

}  // namespace
}  // namespace sluice

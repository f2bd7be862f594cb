// The shuffle buffer's byte share: records are charged their declared length, except a record over
// the per-record limit (refused, holding nothing), which is charged 0 so it neither flushes the
// buffer nor counts as capped; a length near 2^64 does not wrap the sum.
#include "pipeline/shuffle_buffer.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <vector>

namespace sluice {
namespace {

// Pushes items of these lengths; returns how many came out before the drain.
size_t PushAll(ShuffleBuffer* shuffle, std::deque<WorkItem>* items,
               const std::vector<uint64_t>& lengths) {
  size_t out = 0;
  for (uint64_t length : lengths) {
    items->emplace_back();
    items->back().length = length;
    bool taken = false;
    while (!taken) {
      if (shuffle->Push(&items->back(), &taken) != nullptr) ++out;
    }
  }
  return out;
}

TEST_CASE("RefusedRecordIsChargedNothingAndFlushesNothing") {
  PoolCounters pool;
  ShuffleBuffer shuffle(8, /*budget_bytes=*/100, /*max_record_bytes=*/50, &pool);
  shuffle.StartEpoch(1);
  std::deque<WorkItem> items;
  // 30 + 30 + (refused: 0) + 30 = 90, within the share: all held, none emitted early.
  CHECK(PushAll(&shuffle, &items, {30, 30, 1000, 30}) == 0);
  CHECK(shuffle.size() == 4);
  CHECK(shuffle.capped() == 0);
  // A record at the limit is charged: 90 + 50 is over the share.
  CHECK(PushAll(&shuffle, &items, {50}) >= 1);
  CHECK(shuffle.capped() >= 1);
}

TEST_CASE("LengthNear2To64IsChargedNothingAndDoesNotWrapTheSum") {
  PoolCounters pool;
  ShuffleBuffer shuffle(8, /*budget_bytes=*/100, /*max_record_bytes=*/50, &pool);
  shuffle.StartEpoch(1);
  std::deque<WorkItem> items;
  CHECK(PushAll(&shuffle, &items, {40, ~uint64_t{0} - 4, 40}) == 0);
  CHECK(shuffle.capped() == 0);
  // The share still binds at 40 + 0 + 40 + 30 = 110: the huge length did not wrap it to less.
  CHECK(PushAll(&shuffle, &items, {30}) == 1);
  CHECK(shuffle.capped() == 1);
  while (shuffle.Drain() != nullptr) {
  }
  CHECK(shuffle.size() == 0);
}

}  // namespace
}  // namespace sluice

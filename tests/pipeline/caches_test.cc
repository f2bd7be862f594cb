#include "pipeline/caches.h"

#include <catch2/catch.hpp>

#include "pipeline/stats.h"

namespace sluice {
namespace {

constexpr size_t kFiles = 100000;  // an image folder: one file per image

CachedImage Image(int side) {
  CachedImage image;
  image.width = side;
  image.height = side;
  image.pixels = std::make_unique<uint8_t[]>(static_cast<size_t>(side) * side * 3);
  return image;
}

// The per-file bookkeeping (allocated up front, one entry per file of the data set) is the
// cache's memory too: accounted before any image, and spending the budget like images do.
TEST_CASE("DecodedCachesPerFileBookkeepingIsAccountedAndChargedToItsBudget") {
  PipelineStats stats;
  const PoolCounters& pool = stats.pool(Pool::kDecodedCache);
  {
    DecodedCache cache(kFiles, 0, 1, int64_t{64} << 20, &stats);
    const int64_t bookkeeping = pool.bytes.load();
    CHECK(bookkeeping >= static_cast<int64_t>(kFiles * 32));
    CHECK(pool.items.load() == 0);
    cache.Insert(7, 0, Image(16));
    CHECK(pool.items.load() == 1);
    CHECK(pool.bytes.load() > bookkeeping + 16 * 16 * 3);
    CHECK_FALSE(stats.cache_full.load());
  }
  CHECK(pool.bytes.load() == 0);

  // A budget the bookkeeping alone nearly spends holds no more than what is left.
  PipelineStats small_stats;
  DecodedCache small(kFiles, 0, 1, static_cast<int64_t>(kFiles * 32), &small_stats);
  small.Insert(1, 0, Image(64));
  CHECK(small.Find(1, 0) == nullptr);
  CHECK(small_stats.cache_full.load());
}

}  // namespace
}  // namespace sluice

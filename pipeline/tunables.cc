#include "pipeline/tunables.h"

#include <cstdint>
#include <iterator>
#include <string>

#include "formats/jpeg_codec.h"

namespace sluice {
namespace {

constexpr int64_t kComputed = 0;  // the default is computed by ResolveOptions (TunableSpec)

// Indexed by Tunable; the bounds are what one pipeline can hold, not what a server allows a client
// (that is ClientLimits, bounded in turn by these).
constexpr TunableSpec kTunables[] = {
    {Tunable::kCycleLength, "interleave.cycle_length", 8, 1, 1024},
    {Tunable::kBlockLength, "interleave.block_length", 1, 1, 1 << 20},
    {Tunable::kShuffleBuffer, "shuffle.buffer_size", 0, 0, int64_t{1} << 26},
    {Tunable::kImageHeight, "image_height", 224, 8, 4096},
    {Tunable::kImageWidth, "image_width", kComputed, 8, 4096},
    {Tunable::kBatchSize, "batch_size", 256, 1, 65536},
    {Tunable::kPrefetch, "prefetch", 2, 1, 64},
    {Tunable::kThreads, "threads", kComputed, 1, 1024},
    {Tunable::kEpochs, "epochs", 0, 0, int64_t{1} << 40},
    {Tunable::kShardCount, "shard.count", 1, 1, 1 << 20},
    {Tunable::kMaxErrors, "max_errors", 0, 0, int64_t{1} << 50},
    {Tunable::kDecodedShortSide, "cache.decoded_short_side", kComputed, 8, 8192},
    {Tunable::kMemoryBudget, "memory_budget_bytes", kDefaultMemoryBudget, 1, INT64_MAX},
    // A decoded image's pixels: the bound on what one corrupt or hostile header makes us allocate.
    {Tunable::kMaxPixels, "max_pixels", kDefaultMaxPixels, 1, INT64_MAX},
    // Skips above this share of an epoch's records are logged loudly (100: only an epoch of
    // nothing but skips, which fails anyway).
    {Tunable::kSkipWarnPercent, "skip_warn_percent", 10, 1, 100},
};
static_assert(std::size(kTunables) == static_cast<size_t>(Tunable::kCount));

constexpr bool InTableOrder() {
  for (size_t i = 0; i < std::size(kTunables); ++i) {
    if (static_cast<size_t>(kTunables[i].id) != i) return false;
  }
  return true;
}
static_assert(InTableOrder(), "kTunables is indexed by Tunable");

}  // namespace

std::span<const TunableSpec> Tunables() { return kTunables; }

const TunableSpec& Spec(Tunable t) { return kTunables[static_cast<size_t>(t)]; }

Status CheckRange(std::string_view field, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return Status::OK();
  return InvalidArgument(std::string(field) + " = " + std::to_string(value) + " is outside [" +
                         std::to_string(min) + ", " + std::to_string(max) + "]");
}

Status CheckTunable(Tunable t, int64_t value) {
  const TunableSpec& s = Spec(t);
  return CheckRange(s.field, value, s.min, s.max);
}

int64_t ValueOrDefault(Tunable t, int64_t given, int64_t fallback) {
  if (Spec(t).min > 0 && given <= 0) return fallback;
  return given;
}

int64_t ValueOrDefault(Tunable t, int64_t given) {
  return ValueOrDefault(t, given, Spec(t).default_value);
}

}  // namespace sluice

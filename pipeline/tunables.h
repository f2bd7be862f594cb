// Every numeric pipeline option a user or a client may set, with its default and its bounds: the
// one place they are written (DESIGN.md "Seams", Tunables). ResolveOptions (pipeline/options.h),
// the server's config check (server/server_config.cc), the request policy
// (server/request_policy.cc) and ListDatasets all read this table, so a bound changed here changes
// for all of them at once.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "formats/status.h"

namespace sluice {

enum class Tunable {
  kCycleLength,
  kBlockLength,
  kShuffleBuffer,
  kImageHeight,
  kImageWidth,
  kBatchSize,
  kPrefetch,
  kThreads,
  kEpochs,
  kShardCount,
  kMaxErrors,
  kDecodedShortSide,
  kMemoryBudget,
  kMaxPixels,
  kSkipWarnPercent,
  kCount
};

// The library's pipeline memory budget (a server's datasets default to less: server_config.h).
inline constexpr int64_t kDefaultMemoryBudget = int64_t{4} << 30;

// One tunable. A tunable whose minimum is 1 or more treats a value of 0 or less as unset: it takes
// its default. One whose minimum is 0 takes the value as given (0 is meaningful: no shuffle buffer,
// repeat forever, no error budget).
struct TunableSpec {
  Tunable id;
  // Its path in sluice.v1.PipelineOptions, as error messages print it.
  std::string_view field;
  // What an unset value becomes. 0 for a default ResolveOptions computes from other options or the
  // machine: threads (the machine's cores), image_width (image_height) and decoded_short_side (the
  // larger output side scaled by 256/224). cycle_length's default is also capped at the number of
  // files.
  int64_t default_value;
  int64_t min;
  int64_t max;
};

// The whole table, indexed by Tunable.
std::span<const TunableSpec> Tunables();
const TunableSpec& Spec(Tunable t);

// InvalidArgument "FIELD = VALUE is outside [MIN, MAX]" unless MIN <= value <= MAX.
Status CheckRange(std::string_view field, int64_t value, int64_t min, int64_t max);
// CheckRange with the tunable's field and bounds.
Status CheckTunable(Tunable t, int64_t value);

// The value an option takes: `given` when it is set (see TunableSpec), else `fallback`.
int64_t ValueOrDefault(Tunable t, int64_t given, int64_t fallback);
// ValueOrDefault with the table's default.
int64_t ValueOrDefault(Tunable t, int64_t given);

// An unset image width (0 or less) is the height: a square image.
inline int WidthOrHeight(int width, int height) { return width > 0 ? width : height; }

}  // namespace sluice

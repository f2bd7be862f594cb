// The report both `sluice profile` (a pipeline in this process) and `sluice profile --target` (a
// job of a running server, through GetStats) print: per-stage load over the measured window, the
// bottleneck and what would help. One computation for both, so the two cannot disagree; only the
// wording of a fix differs (a flag of this command, or a setting of the server's configuration).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/stats.h"

namespace sluice {

enum class ProfileSide { kLocal, kRemote };

// What the report knows beyond the stats. Zero or false where the side cannot know it (a remote
// profile does not see the server's cores, files or compression).
struct ProfileContext {
  ProfileSide side = ProfileSide::kLocal;
  int cores = 0;
  int decoded_short_side = 0;
  size_t files = 0;
  bool compressed = false;
};

struct StageRow {
  std::string name;
  double items_per_sec = 0;
  double mb_per_sec = 0;
  // Fractions of the window times the threads the stage may use (decode: the decode threads; every
  // other stage runs on one), each within [0, 1].
  double busy_fraction = 0;
  double starved_fraction = 0;
  double blocked_fraction = 0;
  int parallelism = 0;  // most threads seen in the stage at once
};

struct Bottleneck {
  std::string stage;
  std::string reason;
  std::vector<std::string> fixes;
};

struct ProfileReport {
  std::vector<StageRow> stages;  // read, decode, batch (shuffle is timed within read)
  double consumer_wait_fraction = 0;
  Bottleneck bottleneck;
};

// The report on the window between two snapshots of one pipeline. consumer_wait_fraction is the
// share of the window the consumer waited for a batch: the pipeline's consumer stage locally, the
// client's own measured waits remotely. REQUIRES: after was taken after before, of the same
// pipeline (same stages in the same order).
ProfileReport MakeProfileReport(const StatsSnapshot& before, const StatsSnapshot& after,
                                double consumer_wait_fraction, const ProfileContext& context);

// The stages as the --json output's "stages" array, and the bottleneck as its "bottleneck" object.
nlohmann::json StagesJson(const ProfileReport& report);
nlohmann::json BottleneckJson(const ProfileReport& report);

// The stage table and the bottleneck with its fixes, as printed for people.
std::string FormatStageTable(const ProfileReport& report);
std::string FormatBottleneck(const ProfileReport& report);

}  // namespace sluice

#include "server/tools/profile_report.h"

#include <algorithm>

#include <fmt/format.h>

namespace sluice {
namespace {

// A stage this busy (or a consumer waiting this little) is where the time goes.
constexpr double kSaturated = 0.7;
constexpr double kConsumerBound = 0.05;

// Counters are added when a wait or a piece of work ends, so one that began before the window's
// first snapshot is counted whole inside the window, and the two snapshots read their counters a
// moment apart: a fraction can come out a little over 1 (a "blocked 101%") or under 0. No thread
// can be busy, starved or blocked for more than all of the window, so the fraction is clamped to
// what can be true.
double Fraction(double seconds, double window_seconds) {
  if (window_seconds <= 0) return 0;
  return std::clamp(seconds / window_seconds, 0.0, 1.0);
}

const PoolSnapshot* FindPool(const StatsSnapshot& s, std::string_view name) {
  for (const PoolSnapshot& p : s.pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// A cache is in use when the pipeline has one (its pool has a budget) or holds entries.
bool CacheInUse(const StatsSnapshot& s, std::string_view pool) {
  const PoolSnapshot* p = FindPool(s, pool);
  return p != nullptr && (p->limit_bytes > 0 || p->bytes > 0);
}

StageRow Row(const ProfileReport& report, std::string_view name) {
  for (const StageRow& r : report.stages) {
    if (r.name == name) return r;
  }
  return StageRow{};
}

// The same advice in the words of each side: a flag of `sluice profile`, or a setting of the
// server's configuration.
std::string Say(const ProfileContext& c, std::string local, std::string remote) {
  return c.side == ProfileSide::kLocal ? std::move(local) : std::move(remote);
}

Bottleneck ReadBound(const StatsSnapshot& s, const StageRow& read, const ProfileContext& c) {
  Bottleneck b{Say(c, "read", "server read"),
               fmt::format("the reader was busy {:.0f}% of the time", 100 * read.busy_fraction),
               {}};
  if (!CacheInUse(s, "record_cache") && !CacheInUse(s, "decoded_cache")) {
    b.fixes.push_back(Say(c, "--cache records (later epochs skip file I/O)",
                          "cache { mode: CACHE_RECORDS } on the dataset (later epochs skip "
                          "file I/O)"));
  }
  b.fixes.push_back(Say(c, "a larger --cycle-length (more files read at once)",
                        "a larger interleave.cycle_length on the dataset (more files read at "
                        "once)"));
  if (c.files > 256) b.fixes.push_back("fewer, larger files (~100-200 MB each)");
  if (c.compressed) b.fixes.push_back("uncompressed shards (inflate is serial)");
  return b;
}

Bottleneck DecodeBound(const StatsSnapshot& s, const StageRow& decode, const ProfileContext& c) {
  const int threads = s.decode_parallelism_max;
  Bottleneck b{Say(c, "decode", "server decode"),
               fmt::format("decode threads were busy {:.0f}% of the time on {} threads",
                           100 * decode.busy_fraction, threads),
               {}};
  if (c.side == ProfileSide::kRemote) {
    b.fixes.push_back(
        "more decode threads on the server "
        "(ServerConfig.threads) or more servers "
        "(--target A --target B, each serving a shard)");
  } else if (threads < c.cores) {
    b.fixes.push_back(fmt::format("more --threads ({} cores here)", c.cores));
  }
  // A decoded cache already in use (warm or filling) is no advice: it is what ran.
  if (!CacheInUse(s, "decoded_cache")) {
    std::string size;
    if (c.decoded_short_side > 0) {
      // A 4:3 image at the cache's short side, RGB.
      const double per_image = static_cast<double>(c.decoded_short_side) * c.decoded_short_side * 4;
      size = fmt::format(
          ": ~{:.0f} KB per image at short side {} ({:.1f} GB "
          "per million images)",
          per_image / 1e3, c.decoded_short_side, per_image * 1e6 / 1e9);
    }
    b.fixes.push_back(Say(c, "--cache decoded if the data set fits in memory",
                          "cache { mode: CACHE_DECODED } on the dataset when "
                          "it fits in memory") +
                      size);
  }
  if (c.side == ProfileSide::kLocal) {
    b.fixes.push_back("more machines: serve shards from several `sluice serve` workers");
  }
  return b;
}

Bottleneck FindBottleneck(const StatsSnapshot& s, const ProfileReport& r, const ProfileContext& c) {
  const StageRow read = Row(r, "read");
  const StageRow decode = Row(r, "decode");
  if (r.consumer_wait_fraction < kConsumerBound) {
    const double waiting = 100 * (1 - r.consumer_wait_fraction);
    return {
        Say(c, "consumer", "client"),
        Say(c, fmt::format("batches were waiting for the consumer {:.0f}% of the time", waiting),
            fmt::format("batches waited for this client; it read them {:.0f}% "
                        "of the time",
                        waiting)),
        {Say(c, "the pipeline keeps up; speed up the consumer (trainer) instead",
             "the service keeps up; the consumer is the limit")}};
  }
  if (read.busy_fraction > kSaturated && read.busy_fraction >= decode.busy_fraction) {
    return ReadBound(s, read, c);
  }
  if (decode.busy_fraction > kSaturated) return DecodeBound(s, decode, c);
  if (c.side == ProfileSide::kRemote) {
    return {"transport",
            fmt::format("the client waited {:.0f}% of the time while the "
                        "server's read was {:.0f}% "
                        "and decode {:.0f}% busy",
                        100 * r.consumer_wait_fraction, 100 * read.busy_fraction,
                        100 * decode.busy_fraction),
            {"a unix: socket when client and server share a machine",
             "a larger client prefetch (--prefetch), or a faster network"}};
  }
  return {"pipeline",
          fmt::format("no stage is saturated (read {:.0f}%, decode {:.0f}% busy)",
                      100 * read.busy_fraction, 100 * decode.busy_fraction),
          {"a larger --prefetch, or a larger shuffle buffer if reads stall on it"}};
}

}  // namespace

ProfileReport MakeProfileReport(const StatsSnapshot& before, const StatsSnapshot& after,
                                double consumer_wait_fraction, const ProfileContext& context) {
  ProfileReport report;
  report.consumer_wait_fraction = std::clamp(consumer_wait_fraction, 0.0, 1.0);
  const double wall = after.wall_seconds - before.wall_seconds;
  for (const StageSnapshot& a : after.stages) {
    // Matched by name; a stage absent at the start (a job that began inside the window) counts
    // from zero.
    const auto it = std::find_if(before.stages.begin(), before.stages.end(),
                                 [&](const StageSnapshot& s) { return s.name == a.name; });
    const StageSnapshot b = it != before.stages.end() ? *it : StageSnapshot{a.name};
    if (a.name == "consumer" || a.name == "shuffle") continue;  // shuffle is timed within read
    const int lanes = a.name == "decode" ? std::max(1, after.decode_parallelism_max) : 1;
    StageRow r;
    r.name = a.name;
    r.items_per_sec = wall > 0 ? static_cast<double>(a.items - b.items) / wall : 0;
    // The batch stage's bytes are the images it delivered.
    const uint64_t bytes =
        a.name == "batch" ? after.image_bytes - before.image_bytes : a.bytes - b.bytes;
    r.mb_per_sec = wall > 0 ? static_cast<double>(bytes) / wall / 1e6 : 0;
    r.busy_fraction = Fraction(a.busy_seconds - b.busy_seconds, wall * lanes);
    r.starved_fraction = Fraction(a.starved_seconds - b.starved_seconds, wall * lanes);
    r.blocked_fraction = Fraction(a.blocked_seconds - b.blocked_seconds, wall * lanes);
    r.parallelism = a.max_parallelism;
    report.stages.push_back(r);
  }
  report.bottleneck = FindBottleneck(after, report, context);
  return report;
}

nlohmann::json StagesJson(const ProfileReport& report) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageRow& r : report.stages) {
    stages.push_back({{"name", r.name},
                      {"items_per_sec", r.items_per_sec},
                      {"mb_per_sec", r.mb_per_sec},
                      {"busy_fraction", r.busy_fraction},
                      {"parallelism", r.parallelism},
                      {"starved_fraction", r.starved_fraction},
                      {"blocked_fraction", r.blocked_fraction}});
  }
  return stages;
}

nlohmann::json BottleneckJson(const ProfileReport& report) {
  const Bottleneck& b = report.bottleneck;
  return {{"stage", b.stage}, {"reason", b.reason}, {"fixes", b.fixes}};
}

std::string FormatStageTable(const ProfileReport& report) {
  std::string out = fmt::format("  {:<9} {:>11} {:>9} {:>7} {:>6} {:>9} {:>9}\n", "stage",
                                "items/s", "MB/s", "busy", "par", "starved", "blocked");
  for (const StageRow& r : report.stages) {
    out += fmt::format("  {:<9} {:>11.0f} {:>9.1f} {:>6.0f}% {:>6} {:>8.0f}% {:>8.0f}%\n", r.name,
                       r.items_per_sec, r.mb_per_sec, 100 * r.busy_fraction, r.parallelism,
                       100 * r.starved_fraction, 100 * r.blocked_fraction);
  }
  return out;
}

std::string FormatBottleneck(const ProfileReport& report) {
  const Bottleneck& b = report.bottleneck;
  std::string out = fmt::format("\n  bottleneck: {} — {}\n", b.stage, b.reason);
  for (const std::string& fix : b.fixes) out += fmt::format("    try: {}\n", fix);
  return out;
}

}  // namespace sluice

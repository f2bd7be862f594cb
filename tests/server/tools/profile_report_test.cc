// The one profile report of `sluice profile` and `sluice profile --target`, on made-up snapshots.
#include "server/tools/profile_report.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace sluice {
namespace {

// Two snapshots, 10 s apart, of a pipeline with two decode threads.
struct Window {
  StatsSnapshot before;
  StatsSnapshot after;
};

// The reader busy `read_busy` of the window and blocked `read_blocked` seconds of it; the decode
// threads busy `decode_busy` of it.
Window MakeWindow(double read_busy, double decode_busy, double read_blocked = 0) {
  Window w;
  for (StatsSnapshot* s : {&w.before, &w.after}) {
    s->decode_parallelism_max = 2;
    s->stages = {{"read"}, {"shuffle"}, {"decode"}, {"batch"}, {"consumer"}};
    s->pools = {{"read_buffers"}, {"records_in_flight"}, {"shuffle_buffer"},
                {"record_cache"}, {"decoded_cache"},     {"batch_pool"}};
  }
  w.before.wall_seconds = 5;
  w.after.wall_seconds = 15;
  w.after.stages[0].busy_seconds = 10 * read_busy;
  w.after.stages[0].blocked_seconds = read_blocked;
  w.after.stages[2].busy_seconds = 10 * 2 * decode_busy;
  w.after.stages[2].items = 5000;
  return w;
}

// The decoded cache's pool as a pipeline with a warm decoded cache shows it.
void WarmDecodedCache(StatsSnapshot* s) {
  s->pools[4].limit_bytes = int64_t{1} << 30;
  s->pools[4].bytes = int64_t{600} << 20;
}

bool AdvisesDecodedCache(const ProfileReport& r) {
  for (const std::string& fix : r.bottleneck.fixes) {
    if (fix.find("decoded") != std::string::npos || fix.find("DECODED") != std::string::npos) {
      return true;
    }
  }
  return false;
}

ProfileContext Side(ProfileSide side) {
  ProfileContext c;
  c.side = side;
  return c;
}

TEST_CASE("DecodeBoundReportAdvisesTheDecodedCacheOnlyWhenItIsNotInUse") {
  for (ProfileSide side : {ProfileSide::kLocal, ProfileSide::kRemote}) {
    INFO((side == ProfileSide::kLocal ? "local" : "remote"));
    Window cold = MakeWindow(0.2, 0.95);
    ProfileReport r = MakeProfileReport(cold.before, cold.after, 0.5, Side(side));
    CHECK(r.bottleneck.stage.find("decode") != std::string::npos);
    CHECK(AdvisesDecodedCache(r));

    Window warm = MakeWindow(0.2, 0.95);
    WarmDecodedCache(&warm.before);
    WarmDecodedCache(&warm.after);
    r = MakeProfileReport(warm.before, warm.after, 0.5, Side(side));
    CHECK(r.bottleneck.stage.find("decode") != std::string::npos);
    CHECK_FALSE(AdvisesDecodedCache(r));
    CHECK_FALSE(r.bottleneck.fixes.empty());
  }
}

TEST_CASE("BothSidesFindTheSameBottleneckInTheSameFigures") {
  struct Case {
    double read_busy, decode_busy, consumer_wait;
    const char* local;
    const char* remote;
  } cases[] = {
      {0.2, 0.95, 0.5, "decode", "server decode"},
      {0.9, 0.5, 0.5, "read", "server read"},
      {0.2, 0.3, 0.5, "pipeline", "transport"},
      {0.9, 0.95, 0.01, "consumer", "client"},
  };
  for (const Case& c : cases) {
    INFO(c.local);
    const Window w = MakeWindow(c.read_busy, c.decode_busy);
    CHECK(MakeProfileReport(w.before, w.after, c.consumer_wait, Side(ProfileSide::kLocal))
              .bottleneck.stage == c.local);
    CHECK(MakeProfileReport(w.before, w.after, c.consumer_wait, Side(ProfileSide::kRemote))
              .bottleneck.stage == c.remote);
  }
}

// A job that began inside the window (no snapshot of it at the start): its stages count from zero,
// so a decode-bound server is still found decode-bound, not blamed on the transport.
TEST_CASE("JobWithNoStartSnapshotCountsItsStagesFromZero") {
  Window w = MakeWindow(0.2, 0.95);
  StatsSnapshot none;  // what the remote side has when GetStats showed no job at the start
  w.after.wall_seconds = 10;
  const ProfileReport r = MakeProfileReport(none, w.after, 0.5, Side(ProfileSide::kRemote));
  REQUIRE(r.stages.size() == 3);  // read, decode, batch
  CHECK(r.stages[1].name == "decode");
  CHECK(r.stages[1].busy_fraction == Approx(0.95));
  CHECK(r.stages[1].items_per_sec == Approx(500));
  CHECK(r.bottleneck.stage.find("decode") != std::string::npos);
}

TEST_CASE("FractionsAreClampedToTheWindow") {
  // A wait that began before the window is counted whole when it ends inside it: 10.1 s blocked in
  // a 10 s window.
  const Window w = MakeWindow(0.2, 1.02, 10.1);
  const ProfileReport r = MakeProfileReport(w.before, w.after, 1.3, Side(ProfileSide::kLocal));
  REQUIRE(r.stages.size() == 3);
  CHECK(r.stages[0].name == "read");
  CHECK(r.stages[0].blocked_fraction == 1.0);
  CHECK(r.stages[1].name == "decode");
  CHECK(r.stages[1].busy_fraction == 1.0);
  CHECK(r.stages[1].items_per_sec == Approx(500));
  CHECK(r.consumer_wait_fraction == 1.0);
  const std::string table = FormatStageTable(r);
  CHECK(table.find("101%") == std::string::npos);
  CHECK(table.find("100%") != std::string::npos);
  const nlohmann::json stages = StagesJson(r);
  for (const auto& s : stages) {
    CHECK(s["busy_fraction"].get<double>() <= 1.0);
    CHECK(s["blocked_fraction"].get<double>() <= 1.0);
  }
}

}  // namespace
}  // namespace sluice

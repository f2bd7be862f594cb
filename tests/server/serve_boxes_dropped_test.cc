// Boxes the transforms drop are counted where users look: a `sluice serve` job's JobStats, its
// dataset's GetStats (running and finished jobs together) and /metrics agree on the count, and the
// boxes that arrive are the rest.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/example_builder.h"
#include "formats/tfrecord_writer.h"
#include "tests/server/serve_fixture.h"

namespace sluice::serve_testing {
namespace {

constexpr int kRecords = 12;
constexpr int kBatchSize = 5;
// Records r with r % 3 != 0 hold a second box too narrow to keep.
constexpr uint64_t kDroppedPerEpoch = 8;

// Record r: a box [0.1, 0.2, 0.4, 0.6] of class r, and for r % 3 != 0 a second one 0.005 wide:
// 0.2 pixels of the 40-pixel-wide output, under BoxOptions.min_size's default of 1 pixel.
void WriteDetectionShard(const TempDir& dir) {
  auto writer = TFRecordWriter::Create(dir.file("boxes.tfrecord"));
  REQUIRE(writer.ok());
  ExampleBuilder b;
  std::string record;
  for (int r = 0; r < kRecords; ++r) {
    const std::string jpeg = testing::IdJpeg(r);
    const bool thin = r % 3 != 0;
    b.AddBytes("image/encoded", jpeg);
    b.AddInt64("image/class/label", r);
    b.AddFloats("image/object/bbox/xmin",
                thin ? std::vector<float>{0.1f, 0.5f} : std::vector<float>{0.1f});
    b.AddFloats("image/object/bbox/ymin",
                thin ? std::vector<float>{0.2f, 0.3f} : std::vector<float>{0.2f});
    b.AddFloats("image/object/bbox/xmax",
                thin ? std::vector<float>{0.4f, 0.505f} : std::vector<float>{0.4f});
    b.AddFloats("image/object/bbox/ymax",
                thin ? std::vector<float>{0.6f, 0.9f} : std::vector<float>{0.6f});
    b.AddInt64s("image/object/class/label",
                thin ? std::vector<int64_t>{r, r} : std::vector<int64_t>{r});
    b.Finish(&record);
    REQUIRE((*writer)->Write(record).ok());
  }
  REQUIRE((*writer)->Close().ok());
}

// Serves the shard as "det" with boxes, resized to 32x40 in eval mode (no crop: only the thin
// boxes go), with /metrics.
std::string WriteConfig(const TempDir& dir) {
  const std::string path = dir.file("sluice.textproto");
  testing::WriteAll(path,
                    "listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\n"
                    "datasets {\n  name: \"det\"\n  pipeline {\n    files: \"" +
                        dir.file("boxes.tfrecord") +
                        "\"\n    batch_size: " + std::to_string(kBatchSize) +
                        "\n    image_height: 32\n    image_width: 40\n    threads: 2\n"
                        "    mode: MODE_EVAL\n    epochs: 1\n    memory_budget_bytes: 67108864\n"
                        "    transforms { resize { size: 32 size: 40 } }\n"
                        "    boxes { enabled: true }\n  }\n}\n");
  return path;
}

std::string MetricLine(uint64_t n) {
  return "sluice_boxes_dropped_total{dataset=\"det\"} " + std::to_string(n) + "\n";
}

TEST_CASE("DroppedBoxesAreCountedAlikeInJobStatsGetStatsAndMetricsWhileAJobLingersAndAfterItEnds") {
  TempDir dir;
  WriteDetectionShard(dir);
  testing::ServerProcess server({"--config", WriteConfig(dir)});
  REQUIRE(server.running());
  auto client = Connect(server.address());

  // A private job, read to its end, goes soon after its stream; its count stays with the
  // dataset.
  auto first = client->Stream(Request("det"));
  REQUIRE(first.ok());
  const Got got = ReadAll(**first);
  REQUIRE(got.status.ok());
  REQUIRE(got.labels.size() == kRecords);
  first->reset();
  v1::Stats gone = StatsWhen(*client, "det", [](const v1::Stats& s) { return s.jobs_size() == 0; });
  REQUIRE(gone.datasets_size() == 1);
  CHECK(gone.datasets(0).boxes_dropped() == kDroppedPerEpoch);
  CHECK(FetchMetrics(server).find(MetricLine(kDroppedPerEpoch)) != std::string::npos);

  // A shared job lingers after its stream (job_linger_seconds, 30 by default), its JobStats
  // with it: the dataset counts the finished job's boxes and this one's.
  v1::StreamRequest shared = Request("det");
  shared.set_job_name("again");
  auto stream = client->Stream(shared);
  REQUIRE(stream.ok());
  uint64_t kept = 0;
  for (;;) {
    ReceivedBatch b;
    bool end = false;
    REQUIRE((*stream)->Next(&b, &end).ok());
    if (end) break;
    const ReceivedFeature* boxes = b.feature("boxes");
    REQUIRE(boxes != nullptr);
    for (int i = 0; i < b.meta.n; ++i) kept += boxes->floats(static_cast<size_t>(i)).size() / 4;
  }
  CHECK(kept == kRecords);  // the wide box of every record
  auto stats = client->GetStats("det");
  REQUIRE(stats.ok());
  REQUIRE(stats->jobs_size() == 1);
  CHECK(stats->jobs(0).name() == "again");
  CHECK(stats->jobs(0).boxes_dropped() == kDroppedPerEpoch);
  CHECK(stats->datasets(0).boxes_dropped() == 2 * kDroppedPerEpoch);
  CHECK(FetchMetrics(server).find(MetricLine(2 * kDroppedPerEpoch)) != std::string::npos);
  CHECK(FetchMetrics(server).find("# TYPE sluice_boxes_dropped_total counter\n") !=
        std::string::npos);
}

}  // namespace
}  // namespace sluice::serve_testing

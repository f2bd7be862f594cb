// `sluice profile` end to end on small shards: the JSON contract and error reporting.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "formats/example_builder.h"
#include "formats/tfrecord_writer.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::RunSluice;
using testing::TempDir;

TEST_CASE("ProfileJsonHasTheDocumentedFields") {
  TempDir dir;
  testing::WriteTestShards(dir, 3, 40);
  std::string glob = "'" + dir.file("shard-*.tfrecord") + "'";
  for (const char* cache : {"none", "decoded"}) {
    testing::CommandResult r =
        RunSluice("profile --files " + glob + " --batch-size 8 --image-size 32x40 --threads 2 " +
                  "--batches 5 --warmup-batches 1 --json --decode-bound --cache " + cache);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["batches"] == 5);
    CHECK(j["images"] == 40);
    CHECK(j["images_per_sec"].get<double>() > 0);
    CHECK(j["cpu_seconds"].get<double>() > 0);
    CHECK(j["images_per_cpu_sec"].get<double>() ==
          Approx(j["images"].get<double>() / j["cpu_seconds"].get<double>()));
    CHECK(j["bytes_per_sec"].get<double>() ==
          Approx(j["images_per_sec"].get<double>() * 32 * 40 * 3));
    CHECK(j["height"] == 32);
    CHECK(j["width"] == 40);
    std::vector<std::string> names;
    for (const auto& s : j["stages"]) {
      names.push_back(s["name"]);
      CHECK(s.contains("items_per_sec"));
      CHECK(s.contains("busy_fraction"));
      CHECK(s.contains("parallelism"));
    }
    CHECK(names == std::vector<std::string>{"read", "decode", "batch"});
    CHECK(j["bottleneck"]["stage"].is_string());
    CHECK_FALSE(j["bottleneck"]["fixes"].empty());
    CHECK(j["memory"]["batch_pool"]["limit_bytes"] == 6 * 8 * 32 * 40 * 3);
    CHECK(j["decode_bound"]["single_thread_full_decode_per_sec"].get<double>() > 0);
  }
}

TEST_CASE("ProfileHumanOutputNamesTheBottleneck") {
  TempDir dir;
  testing::WriteTestShards(dir, 2, 30);
  testing::CommandResult r = RunSluice("profile --files '" + dir.file("shard-*.tfrecord") +
                                       "' --batch-size 8 --image-size 32 --batches 3");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("images/s") != std::string::npos);
  CHECK(r.out.find("bottleneck: ") != std::string::npos);
  CHECK(r.out.find("batch_pool") != std::string::npos);
}

TEST_CASE("ProfileReadsAnOptionsFileAndFlagsOverrideIt") {
  TempDir dir;
  testing::WriteTestShards(dir, 2, 30);
  testing::WriteAll(dir.file("opts.textproto"),
                    "files: \"" + dir.file("shard-*.tfrecord") + "\"\n"
                    "batch_size: 6\nimage_height: 24\nimage_width: 20\nmode: MODE_EVAL\n");
  testing::CommandResult r = RunSluice("profile --options " + dir.file("opts.textproto") +
                                       " --batches 2 --warmup-batches 0 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["batch_size"] == 6);
  CHECK(j["height"] == 24);
  CHECK(j["width"] == 20);
  r = RunSluice("profile --options " + dir.file("opts.textproto") +
                " --batch-size 4 --batches 2 --warmup-batches 0 --json");
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["batch_size"] == 4);
  CHECK(j["height"] == 24);

  testing::WriteAll(dir.file("bad.textproto"), "batch_sise: 3\n");
  r = RunSluice("profile --options " + dir.file("bad.textproto"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(dir.file("bad.textproto") + ":1:11: ") != std::string::npos);
  CHECK(r.err.find("batch_sise") != std::string::npos);
}

// A mistyped path is refused before any pipeline runs, though the pipeline itself would take a
// missing literal path as one unreadable file (what a file deleted under a server is).
TEST_CASE("ProfileOfAPathThatDoesNotExistIsRefusedUpFrontNamingIt") {
  TempDir dir;
  const std::string missing = dir.file("no-such-shard.tfrecord");
  testing::CommandResult r = RunSluice("profile --files " + missing + " --batches 1");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("no file matches '" + missing + "'"));
  CHECK_THAT(r.err, !Catch::Contains("pipeline:"));  // nothing ran
}

TEST_CASE("ProfileJsonNamesTheTransformListsOutputDtypeAndLayout") {
  TempDir dir;
  testing::WriteTestShards(dir, 2, 30);
  const std::string glob = "'" + dir.file("shard-*.tfrecord") + "'";
  testing::CommandResult r = RunSluice("profile --files " + glob +
                                       " --batch-size 4 --image-size 24 --batches 2 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["dtype"] == "uint8");
  CHECK(j["layout"] == "NHWC");
  CHECK(j["bytes_per_sec"].get<double>() ==
        Approx(j["images_per_sec"].get<double>() * 24 * 24 * 3));

  testing::WriteAll(
      dir.file("jitter.textproto"),
      "transforms { preset: PRESET_IMAGENET_TRAIN }\n"
      "transforms { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 } }\n"
      "transforms { normalize { mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] } }\n"
      "transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } }\n");
  r = RunSluice("profile --options " + dir.file("jitter.textproto") + " --files " + glob +
                " --batch-size 4 --image-size 24 --batches 2 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["dtype"] == "bfloat16");
  CHECK(j["layout"] == "NCHW");
  CHECK(j["bytes_per_sec"].get<double>() ==
        Approx(j["images_per_sec"].get<double>() * 24 * 24 * 3 * 2));
}

// n records, each with a box [0.1, 0.2, 0.4, 0.6] and one 0.005 wide: under a pixel of any output
// narrower than 200 pixels, so BoxOptions.min_size's default drops it.
void WriteThinBoxShard(const std::string& path, int n) {
  auto writer = TFRecordWriter::Create(path);
  REQUIRE(writer.ok());
  ExampleBuilder b;
  std::string record;
  for (int r = 0; r < n; ++r) {
    const std::string jpeg = testing::IdJpeg(r);  // the builder keeps a view until Finish
    b.AddBytes("image/encoded", jpeg);
    b.AddInt64("image/class/label", r);
    b.AddFloats("image/object/bbox/xmin", {0.1f, 0.5f});
    b.AddFloats("image/object/bbox/ymin", {0.2f, 0.3f});
    b.AddFloats("image/object/bbox/xmax", {0.4f, 0.505f});
    b.AddFloats("image/object/bbox/ymax", {0.6f, 0.9f});
    b.AddInt64s("image/object/class/label", {r, r});
    b.Finish(&record);
    REQUIRE((*writer)->Write(record).ok());
  }
  REQUIRE((*writer)->Close().ok());
}

TEST_CASE("ProfileCountsDroppedBoxesOnlyWhereBoxesAreConfigured") {
  TempDir dir;
  WriteThinBoxShard(dir.file("boxes.tfrecord"), 40);
  const std::string eval = "files: \"" + dir.file("boxes.tfrecord") +
                           "\"\nmode: MODE_EVAL\nbatch_size: 8\nimage_height: 32\n"
                           "image_width: 40\ntransforms { resize { size: 32 size: 40 } }\n";
  testing::WriteAll(dir.file("boxes.textproto"), eval + "boxes { enabled: true }\n");
  testing::WriteAll(dir.file("plain.textproto"), eval);
  // 160 images measured, more than the warm-up batch and what is read ahead before the window
  // (the batch pool's 6 batches): the window decodes records, and each drops one box.
  const std::string run = " --threads 2 --warmup-batches 1 --batches 20";
  testing::CommandResult r =
      RunSluice("profile --options " + dir.file("boxes.textproto") + run + " --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.contains("boxes_dropped"));
  CHECK(j["boxes_dropped"].get<uint64_t>() > 0);
  CHECK(j["skipped"] == 0);
  r = RunSluice("profile --options " + dir.file("boxes.textproto") + run);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("  boxes dropped: ") && !Catch::Contains("boxes dropped: 0 "));

  // Without boxes the records' boxes are not read, and the report says nothing of them.
  r = RunSluice("profile --options " + dir.file("plain.textproto") + run + " --json");
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(nlohmann::json::parse(r.out).contains("boxes_dropped"));
  r = RunSluice("profile --options " + dir.file("plain.textproto") + run);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, !Catch::Contains("boxes dropped"));
}

TEST_CASE("ProfileOfMissingFilesSaysWhichPattern") {
  TempDir dir;
  testing::CommandResult r = RunSluice("profile --files '" + dir.file("none-*.tfrecord") + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("no file matches '" + dir.file("none-*.tfrecord") + "'") != std::string::npos);
}

}  // namespace
}  // namespace sluice

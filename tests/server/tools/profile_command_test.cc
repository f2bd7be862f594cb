// `sluice profile` end to end on small shards: the JSON contract and error reporting.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

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

TEST_CASE("ProfileOfMissingFilesSaysWhichPattern") {
  TempDir dir;
  testing::CommandResult r = RunSluice("profile --files '" + dir.file("none-*.tfrecord") + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("no file matches '" + dir.file("none-*.tfrecord") + "'") != std::string::npos);
}

}  // namespace
}  // namespace sluice

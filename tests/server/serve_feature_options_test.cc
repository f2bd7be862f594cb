// A real `sluice serve` checks a dataset's features, boxes and unlabeled at start-up, as
// ResolveOptions resolves them: a bad FeatureSpec, or unlabeled with the dataset's num_classes,
// stops the server naming the dataset and the field; good ones start it.
#include <catch2/catch.hpp>
#include <string>

#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using testing::ServerProcess;
using testing::TempDir;

// A config of one dataset "train" over two test shards, with `pipeline` and `dataset` lines added.
std::string Config(const TempDir& dir, const std::string& pipeline,
                   const std::string& dataset = "") {
  testing::WriteTestShards(dir, 2, 8);
  const std::string path = dir.file("sluice.textproto");
  testing::WriteAll(path,
                    "listen: \"127.0.0.1:0\"\nmetrics_address: \"127.0.0.1:0\"\n"
                    "datasets {\n  name: \"train\"\n" +
                        dataset + "  pipeline {\n    files: \"" + dir.file("shard-*.tfrecord") +
                        "\"\n    batch_size: 4\n    image_height: 32\n    threads: 1\n" + pipeline +
                        "  }\n}\n");
  return path;
}

TEST_CASE("BadFeatureOptionsStopStartUpNamingDatasetAndField") {
  struct Case {
    const char* pipeline;
    const char* dataset;
    const char* message;
  };
  const Case cases[] = {
      {"features { key: \"rgb\" type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_FIXED }\n", "",
       "datasets[\"train\"].pipeline: features[0].length = 0: FEATURE_SHAPE_FIXED needs a length "
       "in [1, 65536] (values per record)"},
      {"boxes { enabled: true max_boxes: 200000 }\n", "",
       "datasets[\"train\"].pipeline: boxes.max_boxes = 200000 is outside [1, 100000]"},
      // The dataset's num_classes is checked with the pipeline, as a request's would be.
      {"unlabeled: true\n", "  num_classes: 10\n",
       "datasets[\"train\"].pipeline: num_classes = 10 with unlabeled: true: an unlabeled dataset "
       "has no classes"},
  };
  for (const Case& c : cases) {
    INFO(c.message);
    TempDir dir;
    ServerProcess server({"--config", Config(dir, c.pipeline, c.dataset)});
    CHECK_FALSE(server.running());
    CHECK(server.output().find(c.message) != std::string::npos);
  }
}

TEST_CASE("FeaturesBoxesAndUnlabeledAreServedFromTheConfig") {
  TempDir dir;
  ServerProcess server(
      {"--config", Config(dir,
                          "unlabeled: true\n"
                          "features { key: \"image/encoded\" name: \"jpeg\" "
                          "type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_SCALAR }\n"
                          "boxes { enabled: true }\n"
                          "max_feature_bytes: 65536\n")});
  INFO(server.output());
  REQUIRE(server.running());
  CHECK(server.Stop(SIGTERM) == 0);
}

}  // namespace
}  // namespace sluice

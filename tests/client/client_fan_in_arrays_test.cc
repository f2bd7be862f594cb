// A fan-in over servers that serve one dataset name with other arrays, through the C++ client
// against real `sluice serve` processes: one unlabeled with a feature, one labelled without. The
// stream is refused before it starts (FAILED_PRECONDITION naming both servers and what each
// serves), over the socket and shared memory alike; it had mixed their batches silently.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/client/client_test_support.h"

namespace sluice {
namespace {

using testing::ServerProcess;
using testing::TempDir;

// The test shards served as "train" (with 160 classes when `classes`), `extra` added to its
// pipeline.
struct Served {
  Served(bool classes, const std::string& extra)
      : config([&] {
          const std::string path = dir.file("sluice.textproto");
          testing::WriteAll(path,
                            "listen: \"127.0.0.1:0\"\n"
                            "datasets {\n  name: \"train\"\n" +
                                std::string(classes ? "  num_classes: 160\n" : "") +
                                "  pipeline {\n    files: \"" + dir.file("shard-*.tfrecord") +
                                "\"\n    batch_size: 8\n    image_height: 32\n"
                                "    image_width: 40\n    threads: 2\n" +
                                extra + "  }\n}\n");
          return path;
        }()) {}
  TempDir dir;
  testing::TestShards shards = testing::WriteTestShards(dir, 4, 40);
  std::string config;
  ServerProcess server{{"--config", config}};
};

TEST_CASE("FanInOverAnUnlabeledServerWithAFeatureAndALabelledOneWithoutIsRefusedNamingBoth") {
  Served unlabeled(
      false,
      "    unlabeled: true\n"
      "    features { key: \"image/class/label\" name: \"cls\" type: FEATURE_TYPE_INT64 "
      "shape: FEATURE_SHAPE_SCALAR }\n");
  Served labelled(true, "");
  REQUIRE(unlabeled.server.running());
  REQUIRE(labelled.server.running());
  for (const bool shared : {false, true}) {
    ClientOptions o;
    o.targets = {unlabeled.server.address(), labelled.server.address()};
    o.shared_memory = shared;
    o.reconnect_deadline = std::chrono::milliseconds(3000);
    auto client = Client::Create(o);
    REQUIRE(client.ok());
    auto stream = (*client)->Stream(testing::Request());
    CAPTURE(shared);
    REQUIRE_FALSE(stream.ok());
    const Status& s = stream.status();
    CAPTURE(s.message());
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    for (const std::string& want : {std::string("unlabeled, features [cls FEATURE_TYPE_INT64[]]"),
                                    std::string("labelled, features []"),
                                    unlabeled.server.address(), labelled.server.address()}) {
      CHECK(s.message().find(want) != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace sluice

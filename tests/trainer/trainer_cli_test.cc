// The `sluice-trainer` binary: its first line, its final JSON line, its exit codes.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/trainer/trainer_test_support.h"

namespace sluice {
namespace {

testing::CommandResult RunTrainer(const std::string& args) {
  return testing::RunCommand(SLUICE_TRAINER_BINARY, args);
}

TEST_CASE("PrintsDeviceFirstAndSummaryJsonLast") {
  testing::SynthServer server;
  const testing::CommandResult r = RunTrainer("--target " + server.server->address() +
                                              " --dataset train --eval-dataset val --steps 20 "
                                              "--batch-size 16 --image-size 32 --patch 8 --width "
                                              "32 --depth 1 --log-every 10 --device cpu");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.rfind("sluice-trainer: device cpu", 0) == 0);
  CHECK(r.out.find("step     10  loss ") != std::string::npos);
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  const nlohmann::json j = nlohmann::json::parse(last);
  for (const char* key : {"steps", "initial_loss", "final_loss", "train_accuracy", "eval_accuracy",
                          "images_per_sec", "data_wait_fraction", "device"}) {
    CHECK(j.contains(key));
  }
  CHECK(j["steps"] == 20);
  CHECK(j["device"] == "cpu");
}

TEST_CASE("DeviceCudaFailsClearly") {
  const testing::CommandResult r = RunTrainer("--target 127.0.0.1:1 --device cuda");
  // On a machine with a device this run gets past device selection and fails to connect.
  INFO(r.err);
  if (r.err.find("--device cuda") != std::string::npos) {
    CHECK(r.exit_code == 2);
    CHECK((r.err.find("no usable CUDA device") != std::string::npos ||
           r.err.find("no CUDA backend") != std::string::npos));
  } else {
    CHECK(r.exit_code != 0);
  }
}

}  // namespace
}  // namespace sluice

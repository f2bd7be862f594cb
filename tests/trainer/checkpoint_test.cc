#include "trainer/checkpoint.h"

#include <catch2/catch.hpp>

#include "tests/test_support.h"

namespace sluice::trainer {
namespace {

Checkpoint Sample() {
  Checkpoint ck;
  ck.config.width = 16;
  ck.config.classes = 5;
  ck.step = 12;
  ck.adam_updates = 11;
  ck.has_position = true;
  ck.epoch = 2;
  ck.index = 7;
  ck.end_record = 240;
  ck.loss_scale = 32768.0f;
  ck.loss_scale_good_steps = 17;
  ck.params = {1.5f, -2.0f, 3.25f};
  ck.first_moment = {0.1f, 0.2f, 0.3f};
  ck.second_moment = {1e-8f, 2e-8f, 3e-8f};
  return ck;
}

TEST_CASE("SaveLoadRoundTrip") {
  testing::TempDir dir;
  const std::string at = dir.file("ck/nested");
  REQUIRE(SaveCheckpoint(at, Sample()).ok());
  Result<Checkpoint> loaded = LoadCheckpoint(at);
  REQUIRE(loaded.ok());
  const Checkpoint expected = Sample();
  CHECK(loaded->config.width == 16);
  CHECK(loaded->config.classes == 5);
  CHECK(loaded->step == 12);
  CHECK(loaded->adam_updates == 11);
  CHECK(loaded->has_position);
  CHECK(loaded->epoch == 2);
  CHECK(loaded->index == 7);
  CHECK(loaded->end_record == 240);
  CHECK(loaded->loss_scale == 32768.0f);
  CHECK(loaded->loss_scale_good_steps == 17);
  CHECK(loaded->params == expected.params);
  CHECK(loaded->first_moment == expected.first_moment);
  CHECK(loaded->second_moment == expected.second_moment);
}

TEST_CASE("MissingCheckpointIsNotFound") {
  testing::TempDir dir;
  CHECK(LoadCheckpoint(dir.file("none")).status().code() == StatusCode::kNotFound);
}

TEST_CASE("ChecksumMismatch") {
  testing::TempDir dir;
  REQUIRE(SaveCheckpoint(dir.file("ck"), Sample()).ok());
  std::string data = testing::ReadAll(CheckpointPath(dir.file("ck")));
  data[data.size() - 10] ^= 0x40;
  testing::WriteAll(CheckpointPath(dir.file("ck")), data);
  const Status s = LoadCheckpoint(dir.file("ck")).status();
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("checksum") != std::string::npos);
}

TEST_CASE("TruncatedCheckpointIsDataLoss") {
  testing::TempDir dir;
  REQUIRE(SaveCheckpoint(dir.file("ck"), Sample()).ok());
  std::string data = testing::ReadAll(CheckpointPath(dir.file("ck")));
  testing::WriteAll(CheckpointPath(dir.file("ck")), data.substr(0, 6));
  CHECK(LoadCheckpoint(dir.file("ck")).status().code() == StatusCode::kDataLoss);
}

}  // namespace
}  // namespace sluice::trainer

#include "trainer/checkpoint.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <sstream>

#include "formats/crc32c.h"
#include "tests/test_support.h"
#include "trainer/checkpointing.h"
#include "trainer/loss_scale.h"

namespace sluice::trainer {
namespace {

constexpr float kCap = LossScaleOptions{}.max_scale;  // the default loss-scale cap

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
  ck.shuffle_bytes = 4096;
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
  CHECK(loaded->shuffle_bytes == 4096);
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

// A header whose values have the right checksum but no sense — a float where a count belongs, a
// negative size, a parameter count the file cannot hold (whose byte count would wrap) — is
// DataLoss naming the field, before any conversion overflows or anything is allocated (found by
// tests/fuzz/checkpoint_fuzz).
TEST_CASE("HeaderValuesOutOfRangeAreDataLossNamingTheField") {
  testing::TempDir dir;
  REQUIRE(SaveCheckpoint(dir.file("ck"), Sample()).ok());
  const std::string data = testing::ReadAll(CheckpointPath(dir.file("ck")));
  uint32_t header_size = 0;
  std::memcpy(&header_size, data.data() + 8, 4);
  const std::string header = data.substr(12, header_size);
  const std::string body = data.substr(12 + header_size, data.size() - 16 - header_size);
  struct Case {
    std::string from, to, field;
  };
  const Case cases[] = {
      {"\"step\":12", "\"step\":8.3e60", "step"},
      {"\"width\":16", "\"width\":-3", "width"},
      {"\"classes\":5", "\"classes\":\"5\"", "classes"},
      {"\"index\":7", "\"index\":18446744073709551615", "index"},
      {"\"parameters\":3", "\"parameters\":4611686018427387907", "parameters"},
      {"\"has_position\":true", "\"has_position\":1", "has_position"},
      {"\"loss_scale\":32768.0", "\"loss_scale\":1e300", "loss_scale"},
      {"\"shuffle_bytes\":4096", "\"shuffle_bytes\":-1", "shuffle_bytes"},
      // Absent means 0 (an older checkpoint): not an error, so no case here; see below.
  };
  for (const Case& c : cases) {
    INFO(c.to);
    std::string changed = header;
    const size_t at = changed.find(c.from);
    REQUIRE(at != std::string::npos);
    changed.replace(at, c.from.size(), c.to);
    std::string file = data.substr(0, 8);
    const uint32_t size = static_cast<uint32_t>(changed.size());
    file.append(reinterpret_cast<const char*>(&size), 4);
    file += changed + body;
    const uint32_t crc = crc32c::Mask(crc32c::Value(file));
    file.append(reinterpret_cast<const char*>(&crc), 4);
    testing::WriteAll(CheckpointPath(dir.file("ck")), file);
    const Status s = LoadCheckpoint(dir.file("ck")).status();
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK_THAT(s.message(), Catch::Contains(CheckpointPath(dir.file("ck"))) &&
                                Catch::Contains(c.field));
  }
}

// A checkpoint written before positions carried the shuffle's share loads with 0: the server
// accepts such a start_position unchecked, as it did.
TEST_CASE("CheckpointWithoutShuffleBytesLoadsWithNone") {
  testing::TempDir dir;
  REQUIRE(SaveCheckpoint(dir.file("ck"), Sample()).ok());
  const std::string data = testing::ReadAll(CheckpointPath(dir.file("ck")));
  uint32_t header_size = 0;
  std::memcpy(&header_size, data.data() + 8, 4);
  std::string header = data.substr(12, header_size);
  const std::string body = data.substr(12 + header_size, data.size() - 16 - header_size);
  const std::string field = "\"shuffle_bytes\":4096,";
  const size_t at = header.find(field);
  REQUIRE(at != std::string::npos);
  header.erase(at, field.size());
  std::string file = data.substr(0, 8);
  const uint32_t size = static_cast<uint32_t>(header.size());
  file.append(reinterpret_cast<const char*>(&size), 4);
  file += header + body;
  const uint32_t crc = crc32c::Mask(crc32c::Value(file));
  file.append(reinterpret_cast<const char*>(&crc), 4);
  testing::WriteAll(CheckpointPath(dir.file("ck")), file);
  Result<Checkpoint> loaded = LoadCheckpoint(dir.file("ck"));
  REQUIRE(loaded.ok());
  CHECK(loaded->shuffle_bytes == 0);
  CHECK(loaded->end_record == 240);
}

// Parameter offsets are padded for the GPU's GEMMs (ParameterLayout::kAlignment); the file keeps
// one value per parameter, so its meaning (and files written before the padding) do not change.
TEST_CASE("PaddedParametersAreStoredUnpaddedAndResumeRestoresThePadding") {
  ModelConfig config;
  config.image_size = 12;
  config.patch = 4;
  config.width = 20;
  config.classes = 7;
  const ParameterLayout layout(config);
  int64_t end = 0;  // of the previous tensor
  for (const ParameterTensor& t : layout.tensors()) {
    CHECK(t.offset % ParameterLayout::kAlignment == 0);
    CHECK(t.offset >= end);
    end = t.offset + t.size;
  }
  REQUIRE(layout.total() > layout.parameters());  // this shape has padding
  // Each tensor's values are its parameter indices, the padding zero.
  std::vector<float> flat(layout.total(), 0.0f);
  std::vector<float> packed;
  for (const ParameterTensor& t : layout.tensors()) {
    for (int64_t i = 0; i < t.size; ++i) {
      flat[t.offset + i] = static_cast<float>(packed.size());
      packed.push_back(flat[t.offset + i]);
    }
  }
  CHECK(layout.Pack(flat) == packed);
  CHECK(layout.Unpack(packed) == flat);

  testing::TempDir dir;
  Checkpoint ck;
  ck.config = config;
  ck.params = ck.first_moment = ck.second_moment = layout.Pack(flat);
  REQUIRE(SaveCheckpoint(dir.file("ck"), ck).ok());
  TrainState state;
  state.params.assign(layout.total(), -1.0f);
  state.first_moment = state.second_moment = state.params;
  RunPosition position;
  std::ostringstream log;
  const Status resumed = ResumeFrom(dir.file("ck"), config, false, kCap, &state, &position, log);
  INFO(resumed.ToString());
  REQUIRE(resumed.ok());
  CHECK(state.params == flat);
  CHECK(state.first_moment == flat);
  CHECK(state.second_moment == flat);
  // A padded vector in the file is another model's: refused, not misread.
  ck.params = ck.first_moment = ck.second_moment = flat;
  REQUIRE(SaveCheckpoint(dir.file("ck"), ck).ok());
  CHECK(ResumeFrom(dir.file("ck"), config, false, kCap, &state, &position, log).code() ==
        StatusCode::kFailedPrecondition);
}

// A checkpoint written while the cap was 2^16 may hold that scale: an fp16 run resumes at the cap
// (2^15), where fp16 holds the negated scale, instead of skipping steps until it backs off.
TEST_CASE("Fp16ResumeClampsAScaleAboveTheCap") {
  ModelConfig config;
  config.image_size = 8;
  config.patch = 4;
  config.width = 8;
  config.classes = 3;
  const ParameterLayout layout(config);
  Checkpoint ck;
  ck.config = config;
  ck.params = ck.first_moment = ck.second_moment =
      std::vector<float>(static_cast<size_t>(layout.parameters()), 0.5f);
  ck.loss_scale = 65536.0f;
  ck.loss_scale_good_steps = 7;
  testing::TempDir dir;
  REQUIRE(SaveCheckpoint(dir.file("ck"), ck).ok());
  TrainState state;
  RunPosition position;
  std::ostringstream log;
  REQUIRE(ResumeFrom(dir.file("ck"), config, /*fp16=*/true, kCap, &state, &position, log).ok());
  CHECK(state.loss_scale.scale == kCap);
  CHECK(state.loss_scale.good_steps == 7);
}

}  // namespace
}  // namespace sluice::trainer

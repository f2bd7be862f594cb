// ModelConfig::Validate and ValidateBatch: every size the backends index with is bounded, and an
// out-of-range one is an InvalidArgument naming its field.
#include "trainer/model.h"

#include <catch2/catch.hpp>
#include <string>

namespace sluice::trainer {
namespace {

ModelConfig With(void (*change)(ModelConfig&)) {
  ModelConfig c;
  change(c);
  return c;
}

TEST_CASE("ValidateNamesTheFieldOutOfRange") {
  struct Case {
    ModelConfig config;
    std::string message;
  };
  const Case cases[] = {
      {With([](ModelConfig& c) { c.patch = 0; }), "patch 0"},
      {With([](ModelConfig& c) { c.image_size = 30; }), "image size 30"},
      {With([](ModelConfig& c) { c.image_size = 8192; }), "image size 8192 is over 4096"},
      {With([](ModelConfig& c) { c.image_size = 4096, c.patch = 8; }), "262144 tokens"},
      {With([](ModelConfig& c) { c.width = 8193; }), "width 8193"},
      {With([](ModelConfig& c) { c.depth = 65; }), "depth 65"},
      {With([](ModelConfig& c) { c.classes = 1; }), "num_classes 1"},
  };
  for (const Case& c : cases) {
    INFO(c.message);
    const Status status = c.config.Validate();
    REQUIRE(status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(status.message(), Catch::Contains(c.message));
  }
  CHECK(ModelConfig().Validate().ok());
  CHECK(With([](ModelConfig& c) { c.image_size = 4096, c.patch = 16; }).Validate().ok());
}

TEST_CASE("ValidateBatchKeepsBatchTimesTokensAnInt") {
  ModelConfig c;
  c.image_size = 4096;
  c.patch = 16;  // 65536 tokens: at most 32767 images
  REQUIRE(c.Validate().ok());
  CHECK(c.ValidateBatch(32767).ok());
  const Status status = c.ValidateBatch(32768);
  REQUIRE(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("batch size 32768"));
  CHECK(c.ValidateBatch(0).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::trainer

// Transform sets through a real `sluice serve` (issue 16): a request chooses one of the sets its
// dataset offers, never a list of its own; ListDatasets describes them; batches and plans say
// their dtype and layout; bad sets stop the server at start naming the field.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sluice/v1/service.grpc.pb.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Fixture;
using serve_testing::Raw;
using serve_testing::ReadRaw;
using serve_testing::Request;
using serve_testing::Stub;
using testing::ServerProcess;

// Two sets besides the default: bf16 NCHW normalized, and mixup.
const char* kSets = R"(  transform_sets {
    name: "bf16"
    transforms { preset: PRESET_IMAGENET_TRAIN }
    transforms { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 } }
    transforms { normalize { mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] } }
    transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } }
  }
  transform_sets {
    name: "mix"
    transforms { preset: PRESET_IMAGENET_TRAIN }
    transforms { mixup { alpha: 0.2 } }
  }
)";

TEST_CASE("ARequestChoosesAnOfferedTransformSetAndItsBatchesSayTheirDtypeAndLayout") {
  Fixture f(2, 8, "", kSets);
  ServerProcess server(f.Args());
  REQUIRE(server.running());

  auto request = Request();
  request.set_transform_set("bf16");
  const Raw bf16 = ReadRaw(server.address(), request);
  REQUIRE(bf16.status.ok());
  REQUIRE(bf16.batches.size() == 2);
  for (const v1::Batch& b : bf16.batches) {
    CHECK(b.dtype() == v1::DTYPE_BFLOAT16);
    CHECK(b.layout() == v1::LAYOUT_NCHW);
    REQUIRE(b.shape_size() == 4);
    CHECK(b.shape(1) == 3);
    CHECK(b.shape(2) == 32);
    CHECK(b.shape(3) == 40);
    CHECK(b.images().size() == static_cast<size_t>(b.shape(0)) * 3 * 32 * 40 * 2);
  }

  // The default set is today's uint8 NHWC, written as before (no dtype or layout on the wire).
  const Raw plain = ReadRaw(server.address(), Request());
  REQUIRE(plain.status.ok());
  CHECK(plain.batches[0].dtype() == v1::DTYPE_UINT8);
  CHECK(plain.batches[0].shape(3) == 3);
  CHECK(plain.batches[0].images().size() == 8u * 32 * 40 * 3);

  auto mix = Request();
  mix.set_transform_set("mix");
  const Raw mixed = ReadRaw(server.address(), mix);
  REQUIRE(mixed.status.ok());
  for (const v1::Batch& b : mixed.batches) {
    REQUIRE(b.mixed_labels_size() == b.labels_size());
    REQUIRE(b.label_weights_size() == b.labels_size());
    CHECK(b.mixed_labels(1) == b.labels(0));
  }

  // The plan says what the batches will hold.
  auto stub = Stub(server.address());
  grpc::ClientContext context;
  v1::StreamPlan plan;
  REQUIRE(stub->DescribeStream(&context, request, &plan).ok());
  CHECK(plan.transform_set() == "bf16");
  CHECK(plan.dtype() == v1::DTYPE_BFLOAT16);
  CHECK(plan.layout() == v1::LAYOUT_NCHW);
  CHECK_FALSE(plan.mixes_labels());
}

TEST_CASE("AnUnofferedTransformSetIsRefusedNamingWhatIsOffered") {
  Fixture f(1, 4, "", kSets);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto request = Request();
  request.set_transform_set("my_own");
  const Raw r = ReadRaw(server.address(), request);
  CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(r.status.error_message(),
             Catch::Contains("transform_set 'my_own' is not offered by dataset 'train'; it offers: "
                             "default, bf16, mix"));
}

TEST_CASE("AModeThatATransformListWouldIgnoreIsRefused") {
  Fixture f(1, 4, "", kSets);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto request = Request();
  request.set_transform_set("bf16");
  request.set_mode(v1::MODE_EVAL);
  const Raw r = ReadRaw(server.address(), request);
  CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(r.status.error_message(),
             Catch::Contains("mode MODE_EVAL: transform set 'bf16' of dataset 'train' is a "
                             "transform list, which mode does not change"));
  // The empty default list is mode's preset: mode still picks it.
  auto eval = Request();
  eval.set_mode(v1::MODE_EVAL);
  CHECK(ReadRaw(server.address(), eval).status.ok());
}

TEST_CASE("ASetOfFixedSizesIsRefusedAtAnotherRequestedSizeNamingTheSet") {
  Fixture f(
      1, 4, "",
      "transform_sets { name: \"fixed\" transforms { random_resized_crop { size: [32, 40] } } }\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto request = Request();
  request.set_transform_set("fixed");
  request.set_image_height(48);
  const Raw r = ReadRaw(server.address(), request);
  CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(r.status.error_message(),
             Catch::Contains("transform_set 'fixed' at 48x48: transforms[0].random_resized_crop: "
                             "makes 32x40 images"));
}

TEST_CASE("ProfileTargetReadsTheChosenTransformSet") {
  Fixture f(2, 8, "", kSets);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  const std::string base = "profile --target " + server.address() +
                           " --dataset train --batches 2 --warmup-batches 0 "
                           "--no-shared-memory --json --transform-set ";
  auto ok = testing::RunSluice(base + "bf16");
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
  auto bad = testing::RunSluice(base + "nope");
  CHECK(bad.exit_code == 1);
  // The client checks the set against each server's ListDatasets before streaming.
  CHECK_THAT(bad.err, Catch::Contains("transform set 'nope' is not offered by " + server.address() +
                                      ", which offers: default, bf16, mix"));
}

TEST_CASE("ListDatasetsDescribesEveryTransformSetAsConfigured") {
  Fixture f(1, 4, "", kSets);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto stub = Stub(server.address());
  grpc::ClientContext context;
  v1::ListDatasetsResponse list;
  REQUIRE(stub->ListDatasets(&context, v1::ListDatasetsRequest(), &list).ok());
  REQUIRE(list.datasets_size() == 1);
  const auto& sets = list.datasets(0).transform_sets();
  REQUIRE(sets.size() == 3);
  // The default list is empty: the preset of the dataset's mode, which a copy reproduces.
  CHECK(sets[0].name() == "default");
  REQUIRE(sets[0].transforms_size() == 1);
  CHECK(sets[0].transforms(0).preset() == v1::PRESET_IMAGENET_TRAIN);
  CHECK(sets[1].name() == "bf16");
  REQUIRE(sets[1].transforms_size() == 4);
  CHECK(sets[1].transforms(3).output().dtype() == v1::DTYPE_BFLOAT16);
  CHECK(sets[2].name() == "mix");
}

TEST_CASE("BadTransformSetsStopTheServerAtStartNamingTheField") {
  struct Case {
    std::string sets;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"transform_sets { name: \"x\" transforms { preset: PRESET_IMAGENET_TRAIN } "
       "transforms { color_jitter { hue: 0.9 } } }",
       "datasets[\"train\"].transform_sets[0]: transforms[1].color_jitter.hue"},
      {"transform_sets { name: \"default\" }", "transform_sets[0].name"},
      {"transform_sets { name: \"a\" transforms { preset: PRESET_IMAGENET_TRAIN } } "
       "transform_sets { name: \"a\" transforms { preset: PRESET_IMAGENET_TRAIN } }",
       "transform_sets[1].name"},
      {"transform_sets { name: \"../x\" }", "transform_sets[0].name"},
  };
  for (const Case& c : cases) {
    INFO(c.sets);
    Fixture f(1, 4, "", c.sets + "\n");
    const auto r = testing::RunSluice("serve --config " + f.config);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
  // The dataset's own list too.
  Fixture f(1, 4);
  std::string config = testing::ReadAll(f.config);
  const std::string at = "    epochs: 1\n";
  config.replace(config.find(at), at.size(),
                 at + "    transforms { preset: PRESET_IMAGENET_TRAIN } transforms { normalize {} }"
                      " transforms { output { dtype: DTYPE_UINT8 } }\n");
  testing::WriteAll(f.config, config);
  const auto r = testing::RunSluice("serve --config " + f.config);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("datasets[\"train\"].pipeline: transforms[2].output.dtype"));
}

}  // namespace
}  // namespace sluice

// CompileTransforms: what a transform list means, and every kind of bad list refused with the
// field named (issue 16: "bad transform configs are refused with the field named").
#include "pipeline/transform_spec.h"

#include <google/protobuf/text_format.h>

#include <catch2/catch.hpp>
#include <string>

namespace sluice {
namespace {

google::protobuf::RepeatedPtrField<v1::TransformOp> Ops(const std::string& text) {
  v1::PipelineOptions o;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(text, &o));
  return o.transforms();
}

Result<TransformSpec> Compile(const std::string& text, int num_classes = 10) {
  return CompileTransforms(Ops(text), /*eval=*/false, 224, 224, num_classes);
}

// The error names `field`.
void RefusedNaming(const std::string& text, const std::string& field, int num_classes = 10) {
  Result<TransformSpec> r = Compile(text, num_classes);
  INFO(text);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(field));
}

TEST_CASE("EmptyListIsTheModesPresetWritingTheSlotDirectly") {
  auto train = CompileTransforms({}, false, 224, 224, 0);
  REQUIRE(train.ok());
  REQUIRE(train->geometry.size() == 1);
  CHECK(train->geometry[0].kind == GeometryOp::Kind::kPresetTrain);
  CHECK(train->writes_slot_directly());
  CHECK_FALSE(train->mixes_labels());
  auto eval = CompileTransforms({}, true, 224, 224, 0);
  REQUIRE(eval.ok());
  CHECK(eval->geometry[0].kind == GeometryOp::Kind::kPresetEval);
}

TEST_CASE("JitterNormalizeBf16NchwCompilesToGeometryPixelAndOutput") {
  auto r = Compile(R"(
    transforms { preset: PRESET_IMAGENET_TRAIN }
    transforms { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 hue: 0.1 } }
    transforms { normalize { mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] } }
    transforms { output { dtype: DTYPE_BFLOAT16 layout: LAYOUT_NCHW } }
  )");
  REQUIRE(r.ok());
  CHECK(r->geometry.size() == 1);
  REQUIRE(r->pixel.size() == 1);
  const PixelOp& j = r->pixel[0];
  CHECK(j.brightness[0] == Approx(0.6));
  CHECK(j.brightness[1] == Approx(1.4));
  CHECK(j.hue[0] == Approx(-0.1));
  CHECK(j.random_order);
  CHECK(r->output.dtype == DType::kBFloat16);
  CHECK(r->output.layout == Layout::kNchw);
  CHECK(r->output.scale[0] == Approx(1.0 / (255 * 0.229)));
  CHECK(r->output.bias[2] == Approx(-0.406 / 0.225));
  CHECK_FALSE(r->writes_slot_directly());
}

TEST_CASE("NormalizeWithoutOutputGivesFloat32") {
  auto r = Compile("transforms { preset: PRESET_IMAGENET_EVAL } transforms { normalize {} }");
  REQUIRE(r.ok());
  CHECK(r->output.dtype == DType::kFloat32);
  CHECK(r->output.scale[1] == Approx(1.0 / 255));
}

TEST_CASE("ResizeShorterSideThenCenterCropEndsAtTheImageSize") {
  auto r = Compile("transforms { resize { shorter_side: 256 } } transforms { center_crop {} }");
  REQUIRE(r.ok());
  CHECK(r->geometry.size() == 2);
  CHECK(r->geometry[0].shorter_side == 256);
  CHECK(r->writes_slot_directly());
}

TEST_CASE("ResizeOfOneSizeIsTheShorterSideAsInTorchvision") {
  // torchvision's Resize([256]) keeps the aspect; [s, s] is the square.
  auto r = Compile("transforms { resize { size: 256 } } transforms { center_crop {} }");
  REQUIRE(r.ok());
  CHECK(r->geometry[0].shorter_side == 256);
  auto square = Compile("transforms { resize { size: [224, 224] } }");
  REQUIRE(square.ok());
  CHECK(square->geometry[0].shorter_side == 0);
  CHECK(square->geometry[0].height == 224);
  RefusedNaming("transforms { resize { size: 0 } }", "transforms[0].resize.size");
}

TEST_CASE("RandAugmentTakesMagnitudeZeroAndNoOps") {
  auto r = Compile(
      "transforms { preset: PRESET_IMAGENET_TRAIN } "
      "transforms { rand_augment { magnitude: 0 num_ops: 0 } }");
  REQUIRE(r.ok());
  CHECK(r->pixel[0].magnitude == 0);
  CHECK(r->pixel[0].num_ops == 0);
  auto defaults = Compile(
      "transforms { preset: PRESET_IMAGENET_TRAIN } "
      "transforms { rand_augment {} }");
  REQUIRE(defaults.ok());
  CHECK(defaults->pixel[0].magnitude == 9);
  CHECK(defaults->pixel[0].num_ops == 2);
}

TEST_CASE("RotateTakesOneBoundOrARangeWithinAFullTurn") {
  auto r =
      Compile("transforms { preset: PRESET_IMAGENET_TRAIN } transforms { rotate { degrees: 15 } }");
  REQUIRE(r.ok());
  CHECK(r->pixel[0].kind == PixelOp::Kind::kRotate);
  CHECK(r->pixel[0].degrees[0] == -15);
  CHECK(r->pixel[0].degrees[1] == 15);
  RefusedNaming("transforms { preset: PRESET_IMAGENET_TRAIN } transforms { rotate { } }",
                "transforms[1].rotate.degrees");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { rotate { degrees: -5 } }",
      "transforms[1].rotate.degrees");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { rotate { degrees: [-400, 10] } }",
      "transforms[1].rotate.degrees");
  // A rotation is applied to the resampled image: a crop may not follow it.
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { rotate { degrees: 5 } } "
      "transforms { center_crop {} }",
      "transforms[2].center_crop: a geometric op after the per-pixel op "
      "transforms[1].rotate");
}

TEST_CASE("MixupMayFollowOutput") {
  auto r = Compile(
      "transforms { preset: PRESET_IMAGENET_TRAIN } "
      "transforms { output { dtype: DTYPE_FLOAT32 } } transforms { mixup {} }");
  REQUIRE(r.ok());
  CHECK(r->mixes_labels());
}

TEST_CASE("BadListsAreRefusedNamingTheField") {
  RefusedNaming("transforms {}", "transforms[0]");
  RefusedNaming("transforms { preset: PRESET_UNSPECIFIED }", "transforms[0].preset");
  RefusedNaming("transforms { random_resized_crop { scale: [0.5, 0.1] } }",
                "transforms[0].random_resized_crop.scale");
  RefusedNaming("transforms { random_resized_crop { scale: [0, 1.5] } }",
                "transforms[0].random_resized_crop.scale");
  RefusedNaming("transforms { random_resized_crop { ratio: [-1, 2] } }",
                "transforms[0].random_resized_crop.ratio");
  RefusedNaming("transforms { random_resized_crop { size: [1, 2, 3] } }",
                "transforms[0].random_resized_crop.size");
  RefusedNaming("transforms { center_crop { size: 0 } }", "transforms[0].center_crop.size");
  RefusedNaming("transforms { resize { shorter_side: 256 size: 224 } }", "transforms[0].resize");
  RefusedNaming("transforms { resize { } }", "transforms[0].resize");
  RefusedNaming("transforms { random_crop { padding: -4 } }", "transforms[0].random_crop.padding");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { flip { horizontal_p: 1.5 } }",
      "transforms[1].flip.horizontal_p");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { color_jitter { brightness: -1 } }",
      "transforms[1].color_jitter.brightness");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { color_jitter { hue: 0.7 } }",
      "transforms[1].color_jitter.hue");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { color_jitter { contrast: [2, 1] } "
      "}",
      "transforms[1].color_jitter.contrast");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { gaussian_blur { kernel_size: 4 } "
      "}",
      "transforms[1].gaussian_blur.kernel_size");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { gaussian_blur { kernel_size: 3 "
      "sigma: [0, 1] } }",
      "transforms[1].gaussian_blur.sigma");
  RefusedNaming("transforms { preset: PRESET_IMAGENET_TRAIN } transforms { posterize { bits: 9 } }",
                "transforms[1].posterize.bits");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { solarize { threshold: 300 } }",
      "transforms[1].solarize.threshold");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { rand_augment { magnitude: 31 } }",
      "transforms[1].rand_augment.magnitude");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { normalize { std: [1, 0, 1] } }",
      "transforms[1].normalize.std");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { normalize { mean: [1, 2] } }",
      "transforms[1].normalize.mean");
}

TEST_CASE("AnOrderThatCannotBeFusedIsRefusedNamingBothOps") {
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { grayscale {} } "
      "transforms { flip {} }",
      "transforms[2].flip: a geometric op after the per-pixel op transforms[1].grayscale");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { normalize {} } "
      "transforms { grayscale {} }",
      "transforms[2].grayscale: comes after transforms[1].normalize");
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { output {} } "
      "transforms { grayscale {} }",
      "transforms[2].grayscale: comes after output");
}

TEST_CASE("FloatNormalizeWithUint8OutputIsRefused") {
  RefusedNaming(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { normalize {} } "
      "transforms { output { dtype: DTYPE_UINT8 } }",
      "transforms[2].output.dtype");
}

TEST_CASE("MixupWithoutNumClassesIsRefused") {
  RefusedNaming("transforms { preset: PRESET_IMAGENET_TRAIN } transforms { mixup {} }",
                "transforms[1].mixup: needs the dataset's num_classes", /*num_classes=*/0);
  RefusedNaming("transforms { preset: PRESET_IMAGENET_TRAIN } transforms { cutmix { alpha: -1 } }",
                "transforms[1].cutmix.alpha");
  auto r = Compile(
      "transforms { preset: PRESET_IMAGENET_TRAIN } transforms { mixup { alpha: 0.2 } } "
      "transforms { cutmix {} }");
  REQUIRE(r.ok());
  CHECK(r->mixup_alpha == Approx(0.2));
  CHECK(r->cutmix_alpha == Approx(1.0));
  CHECK(r->mixes_labels());
}

TEST_CASE("AListWhoseSizeIsNotThePipelinesIsRefused") {
  RefusedNaming("transforms { center_crop { size: 200 } }",
                "transforms[0].center_crop: makes 200x200 images, but the pipeline's image size is "
                "224x224");
  RefusedNaming("transforms { resize { shorter_side: 224 } }",
                "transforms[0].resize: the list ends at a size that depends on the image");
  RefusedNaming("transforms { normalize {} }", "transforms: no op sets the image size");
  RefusedNaming("transforms { flip {} } transforms { normalize {} }",
                "transforms: no op sets the image size (224x224); a flip keeps");
}

}  // namespace
}  // namespace sluice

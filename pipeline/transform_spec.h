// PipelineOptions.transforms checked and compiled (proto/sluice/v1/config.proto TransformOp): the
// geometric ops, which compose into one crop window and one resampling (pipeline/geometry_plan.h),
// then the per-pixel ops over the resampled image, then the output (normalize, dtype, layout),
// and the batch-level mixes. Immutable once made; shared by every worker's chain.
#pragma once

#include <string>
#include <vector>

#include "formats/crop_window.h"
#include "formats/dtype.h"
#include "formats/image_ops.h"
#include "formats/pixel_ops.h"
#include "formats/status.h"
#include "sluice/v1/config.pb.h"

namespace sluice {

struct GeometryOp {
  enum class Kind {
    kPresetTrain,  // today's MODE_TRAIN draws: RandomResizedCrop, then a flip on one bit
    kPresetEval,   // today's MODE_EVAL window (formats/crop_window.h CenterCrop)
    kRandomResizedCrop,
    kResize,
    kCenterCrop,
    kRandomCrop,
    kFlip,
  };
  Kind kind = Kind::kFlip;
  int height = 0, width = 0;  // the size the op makes (0 with shorter_side)
  int shorter_side = 0;       // kResize by the shorter side
  int padding = 0;            // kRandomCrop
  RandomResizedCropParams crop;
  double horizontal_p = 0, vertical_p = 0;  // kFlip
  ResizeFilter filter = ResizeFilter::kBilinear;
};

struct PixelOp {
  enum class Kind {
    kColorJitter,
    kGrayscale,
    kGaussianBlur,
    kSolarize,
    kPosterize,
    kTrivialAugmentWide,
    kRandAugment,
    kRotate,
  };
  Kind kind = Kind::kGrayscale;
  double p = 1;  // applied with this probability
  // kColorJitter: factor ranges; an absent one (has_* false) is not jittered.
  bool has_brightness = false, has_contrast = false, has_saturation = false, has_hue = false;
  double brightness[2] = {1, 1}, contrast[2] = {1, 1}, saturation[2] = {1, 1}, hue[2] = {0, 0};
  bool random_order = true;
  int kernel_size = 0;           // kGaussianBlur
  double sigma[2] = {0.1, 2.0};  // kGaussianBlur
  double threshold = 0;          // kSolarize
  int bits = 8;                  // kPosterize
  double degrees[2] = {0, 0};    // kRotate: the angle's range, counter-clockwise
  int num_ops = 1, magnitude = 0, num_magnitude_bins = 31;  // the policies
};

struct TransformSpec {
  std::vector<GeometryOp> geometry;
  std::vector<PixelOp> pixel;
  OutputSpec output;
  bool normalize = false;
  // Batch-level (the batcher): Beta(alpha, alpha) mixing; 0 = off.
  double mixup_alpha = 0;
  double cutmix_alpha = 0;

  bool mixes_labels() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
  // The geometry writes the batch slot itself: no per-pixel op, uint8 NHWC out.
  bool writes_slot_directly() const {
    return pixel.empty() && output.dtype == DType::kUint8 && output.layout == Layout::kNhwc;
  }
};

// Checks and compiles `ops` for images of height x width; an empty list is the preset of `mode`
// (eval: true for MODE_EVAL). InvalidArgument naming the field ("transforms[2].color_jitter
// .brightness ...") for an unknown or empty op, a value out of range, an order that cannot be
// fused (a geometric op after a per-pixel one, anything but output after normalize), a list whose
// last size is not height x width, normalize with a uint8 output, or mixup/cutmix without
// num_classes (> 0).
Result<TransformSpec> CompileTransforms(
    const google::protobuf::RepeatedPtrField<v1::TransformOp>& ops, bool eval, int height,
    int width, int num_classes);

}  // namespace sluice

// The augmentation policies TrivialAugmentWide and RandAugment as torchvision 0.14 defines them
// (transforms/autoaugment.py): the same 14 ops in the same order, the same magnitude bins
// (_augmentation_space, float32 as torch makes them), signed at random where torchvision signs
// them, geometric ops nearest-neighbour with fill 0. The draws come from our AugmentRng, not
// torch's generator, in torchvision's order: op index, magnitude bin (TrivialAugmentWide), sign.
// Pure functions; the caller owns the image and the scratch.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "formats/pixel_ops.h"
#include "formats/seed.h"

namespace sluice {

enum class AutoAugmentPolicy { kTrivialAugmentWide, kRandAugment };

// The ops of both policies' spaces, in torchvision's dict order (what a uniform draw indexes).
enum class AutoAugmentOpKind : uint8_t {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
inline constexpr int kNumAutoAugmentOps = 14;

// torchvision's name of the op ("ShearX", ...), and back (nullopt for an unknown name).
std::string_view AutoAugmentOpName(AutoAugmentOpKind kind);
std::optional<AutoAugmentOpKind> AutoAugmentOpFromName(std::string_view name);

// Whether torchvision negates the op's magnitude with probability 0.5.
bool AutoAugmentOpIsSigned(AutoAugmentOpKind kind);

// One op with its signed magnitude, in _apply_op's units: ShearX/Y the shear's tangent,
// TranslateX/Y pixels (truncated toward zero when applied), Rotate degrees counter-clockwise,
// Brightness/Color/Contrast/Sharpness the factor minus 1, Posterize bits, Solarize the
// threshold; 0 for Identity, AutoContrast and Equalize.
struct AutoAugmentOp {
  AutoAugmentOpKind kind = AutoAugmentOpKind::kIdentity;
  double magnitude = 0;
};

// The op's magnitude bins, _augmentation_space(num_bins[, (height, width)])[name][0]: num_bins
// values, or none for the ops without a magnitude. width and height are the image's the policy
// runs on (RandAugment's translations are 150/331 of them).
// REQUIRES: num_bins >= 2.
std::vector<float> AutoAugmentMagnitudes(AutoAugmentPolicy policy, AutoAugmentOpKind kind,
                                         int num_bins, int width, int height);

// The ops one image gets: TrivialAugmentWide one op at a uniformly drawn bin (num_ops and
// magnitude unused); RandAugment num_ops ops (repeats allowed), each at bin `magnitude`.
// REQUIRES: num_bins >= 2; for RandAugment 0 <= magnitude < num_bins and num_ops >= 0.
std::vector<AutoAugmentOp> SampleAutoAugment(AutoAugmentPolicy policy, int num_ops, int magnitude,
                                             int num_bins, int width, int height, AugmentRng& rng);

// Applies one op to img in place, as torchvision's _apply_op(img, name, magnitude, NEAREST,
// fill=None). scratch: the caller's, reused across calls (the affine ops' copy of the source,
// Sharpness's unblurred copy).
void ApplyAutoAugmentOp(const AutoAugmentOp& op, MutableImageView img,
                        std::vector<uint8_t>* scratch);

}  // namespace sluice

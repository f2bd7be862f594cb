// The per-pixel ops of a transform list (colour jitter, grayscale, blur, solarize, posterize, the
// policies) applied to a resampled image in list order, each drawing its random parameters from
// the image's generator in a fixed order, so the result depends only on (seed, epoch, position).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/pixel_ops.h"
#include "formats/seed.h"
#include "formats/status.h"
#include "pipeline/transform_spec.h"

namespace sluice {

// What one op drew, for the tests that replay a chain in torchvision (see ApplyPixelOps).
struct PixelOpDraw {
  std::string name;            // "brightness", "contrast", "saturation", "hue", "grayscale", ...
  std::vector<double> params;  // the op's parameters as torchvision's functional op takes them
};

// Applies ops to img in place. draws, when given, receives every op applied with its parameters,
// in the order applied (ops not drawn to apply are left out).
void ApplyPixelOps(const std::vector<PixelOp>& ops, MutableImageView img, AugmentRng& rng,
                     std::vector<float>* blur_scratch, std::vector<uint8_t>* scratch,
                     std::vector<PixelOpDraw>* draws = nullptr);

// ApplyPixelOps, then WriteOutput(img, output, dst): the same draws and bytes. A list that is one
// color_jitter (the common recipe) runs fused (JitterAndWrite: one pass from img into dst);
// img is then scratch, its contents afterwards unspecified.
void ApplyPixelOpsAndWrite(const std::vector<PixelOp>& ops, MutableImageView img, AugmentRng& rng,
                             std::vector<float>* blur_scratch, std::vector<uint8_t>* scratch,
                             const OutputSpec& output, void* dst);

}  // namespace sluice

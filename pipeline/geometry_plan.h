// The geometric ops of a transform list (crops, resizes, flips) composed into one crop window of
// the source image and one resampling: what lets the pipeline decode only the window, at a DCT
// scale, and resample once. Each op acts on the image the previous ones would have made (its
// size known from the header alone); the window is tracked in source coordinates. Windows are
// rounded to whole source pixels at the end, so a resize followed by a crop resamples once from
// the rounded window instead of twice (README: "fused resampling"); a single op, and the presets,
// are exact. Pure maths, deterministic for a given random source.
#pragma once

#include <vector>

#include "formats/crop_window.h"
#include "formats/image_ops.h"
#include "formats/seed.h"
#include "pipeline/transform_spec.h"

namespace sluice {

struct GeometryPlan {
  // source (inside the image) is resampled into dest (inside the out_width x out_height output);
  // output pixels outside dest are 0 (padding). dest empty: the whole output is padding.
  CropWindow source;
  CropWindow dest;
  ResizeOptions resize;

  bool pads(int out_width, int out_height) const {
    return dest.x != 0 || dest.y != 0 || dest.width != out_width || dest.height != out_height;
  }
};

// REQUIRES: ops compiled by CompileTransforms for out_width x out_height; width, height >= 1.
GeometryPlan PlanGeometry(const std::vector<GeometryOp>& ops, int width, int height, int out_width,
                          int out_height, AugmentRng& rng);

}  // namespace sluice

// The geometric ops of a transform list (crops, resizes, flips) composed into one crop window of
// the source image and one resampling: what lets the pipeline decode only the window, at a DCT
// scale, and resample once. Each op acts on the image the previous ones would have made (its
// size known from the header alone); the window is tracked in source coordinates. Windows are
// rounded to whole source pixels at the end, so a resize followed by a crop resamples once from
// the rounded window instead of twice (README: "fused resampling"); a single op, and the presets,
// are exact. Pure maths, deterministic for a given random source.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/crop_window.h"
#include "formats/image_ops.h"
#include "formats/seed.h"
#include "pipeline/transform_spec.h"

namespace sluice {

// Where a plan's geometry takes the points of the source image, exactly (before the source and
// dest windows are rounded to whole pixels), in coordinates normalized to each image: source x
// goes to output u = (x - x0) / width, then 1 - u when flip_x (y likewise). clip is the part of
// the source that every crop of the list kept (their intersection, in normalized source
// coordinates): torchvision.transforms.v2 clamps boxes at each crop, so a box keeps only what
// lies inside all of them. What TransformBoxes (pipeline/box_transform.h) applies.
struct BoxMap {
  double x0 = 0, y0 = 0, width = 1, height = 1;
  bool flip_x = false, flip_y = false;
  double clip_x0 = 0, clip_y0 = 0, clip_x1 = 1, clip_y1 = 1;
};

struct GeometryPlan {
  // source (inside the image) is resampled into dest (inside the out_width x out_height output);
  // output pixels outside dest are 0 (padding). dest empty: the whole output is padding.
  CropWindow source;
  CropWindow dest;
  ResizeOptions resize;
  BoxMap box_map;

  bool pads(int out_width, int out_height) const {
    return dest.x != 0 || dest.y != 0 || dest.width != out_width || dest.height != out_height;
  }
};

// REQUIRES: ops compiled by CompileTransforms for out_width x out_height; width, height >= 1.
GeometryPlan PlanGeometry(const std::vector<GeometryOp>& ops, int width, int height, int out_width,
                          int out_height, AugmentRng& rng);

// Zeroes the pixels of the out_width x out_height RGB image at target (rows of out_width * 3
// bytes) that plan leaves as padding, if any.
void ClearPadding(const GeometryPlan& plan, int out_width, int out_height, uint8_t* target);

// Where plan.dest begins in the out_width-wide RGB image at target.
uint8_t* DestPixels(const GeometryPlan& plan, int out_width, uint8_t* target);

// The geometry of plan rendered from the decoded image: plan.source of image resampled into
// plan.dest of the out_width x out_height RGB image at target (rows of out_width * 3 bytes), with
// plan.resize; every other pixel 0. What the pipeline makes of a decoded image before its
// per-pixel ops (pipeline/augmenter.cc), and what the chain probe replays.
// REQUIRES: plan made by PlanGeometry for image's size and out_width x out_height.
void RenderGeometry(const ImageView& image, const GeometryPlan& plan, int out_width, int out_height,
                    uint8_t* target);

}  // namespace sluice

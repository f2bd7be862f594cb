// A record's boxes through its image's geometry: each box (normalized to the source image) mapped
// by the plan's BoxMap into the output image, clamped to what the crops kept, then dropped when
// too little of it is left (BoxColumns: min_overlap of its source area, min_size output pixels per
// side), as torchvision.transforms.v2 moves boxes with the same crops, resizes and flips and its
// SanitizeBoundingBoxes drops them. Pure maths.
#pragma once

#include <cstdint>

#include "formats/feature_schema.h"
#include "formats/sample_features.h"
#include "pipeline/geometry_plan.h"

namespace sluice {

// Rewrites arrays boxes_index ("boxes", 4 floats a row) and boxes_index + 1 ("box_labels") of
// *features in place: kept boxes in their order, normalized to the out_width x out_height output
// ([xmin, ymin, xmax, ymax], xmin <= xmax, all in [0, 1]); their labels alongside. Returns the
// number of boxes dropped. REQUIRES: features extracted for a schema with boxes enabled.
//
// Per box, in source-normalized coordinates:
// - clipped = the box intersected with map.clip (what every crop kept: torchvision.transforms.v2
//   clamps boxes to each crop, so only their intersection survives the list);
// - overlap = area(clipped) / area(box); a box of zero area (a point or a line) has overlap 1
//   when it lies inside the closed clip, else 0;
// - dropped when overlap is 0 (nothing of it is left, whatever min_overlap), when overlap <
//   boxes.min_overlap (DALI's RandomBBoxCrop rule), or when clipped, mapped to the output, is
//   less than boxes.min_size output pixels wide or high (width × out_width, height ×
//   out_height: SanitizeBoundingBoxes(min_size), which keeps w >= min_size). The pixel sizes
//   are compared with 1/1000 pixel of slack, so a box min_size wide is kept whatever the float32
//   rounding of its normalized coordinates;
// - kept: clipped mapped by u = (x - map.x0) / map.width (v likewise), mirrored (u -> 1 - u,
//   min and max swapped) when map.flip_x / flip_y, clamped to [0, 1], stored as float32.
int TransformBoxes(const BoxMap& map, const BoxColumns& boxes, int out_width, int out_height,
                   size_t boxes_index, SampleFeatures* features);

}  // namespace sluice

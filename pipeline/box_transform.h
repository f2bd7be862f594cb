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
int TransformBoxes(const BoxMap& map, const BoxColumns& boxes, int out_width, int out_height,
                   size_t boxes_index, SampleFeatures* features);

}  // namespace sluice

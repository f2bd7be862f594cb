#include "pipeline/box_transform.h"

#include <algorithm>
#include <cstring>

namespace sluice {
namespace {

// Output pixels a box may fall short of min_size by and still be kept: what float32 coordinates
// (about 1e-7 of the image each) lose on the way, not a real difference in size.
constexpr double kSizeSlackPixels = 1e-3;

struct Span {
  double lo, hi;
};

// The source span [lo, hi] of one axis in output coordinates, mirrored when flip.
Span ToOutput(Span s, double origin, double extent, bool flip) {
  double lo = (s.lo - origin) / extent;
  double hi = (s.hi - origin) / extent;
  if (flip) {
    const double mirrored_lo = 1 - hi;
    hi = 1 - lo;
    lo = mirrored_lo;
  }
  return Span{std::clamp(lo, 0.0, 1.0), std::clamp(hi, 0.0, 1.0)};
}

}  // namespace

int TransformBoxes(const BoxMap& map, const BoxColumns& boxes, int out_width, int out_height,
                   size_t boxes_index, SampleFeatures* features) {
  FeatureValues& coords = features->arrays[boxes_index];
  FeatureValues& labels = features->arrays[boxes_index + 1];
  const uint32_t count = coords.rows;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < count; ++i) {
    float box[4];
    std::memcpy(box, coords.data.data() + static_cast<size_t>(i) * sizeof(box), sizeof(box));
    const Span x{box[0], box[2]}, y{box[1], box[3]};
    const Span cx{std::max(x.lo, map.clip_x0), std::min(x.hi, map.clip_x1)};
    const Span cy{std::max(y.lo, map.clip_y0), std::min(y.hi, map.clip_y1)};
    const double area = (x.hi - x.lo) * (y.hi - y.lo);
    double overlap = 0;
    if (cx.hi >= cx.lo && cy.hi >= cy.lo) {
      overlap = area > 0 ? (cx.hi - cx.lo) * (cy.hi - cy.lo) / area : 1.0;
    }
    if (overlap <= 0 || overlap < boxes.min_overlap) continue;
    const Span u = ToOutput(cx, map.x0, map.width, map.flip_x);
    const Span v = ToOutput(cy, map.y0, map.height, map.flip_y);
    if ((u.hi - u.lo) * out_width + kSizeSlackPixels < boxes.min_size ||
        (v.hi - v.lo) * out_height + kSizeSlackPixels < boxes.min_size) {
      continue;
    }
    const float out[4] = {static_cast<float>(u.lo), static_cast<float>(v.lo),
                          static_cast<float>(u.hi), static_cast<float>(v.hi)};
    std::memcpy(coords.data.data() + static_cast<size_t>(kept) * sizeof(out), out, sizeof(out));
    if (kept != i) {
      std::memmove(labels.data.data() + static_cast<size_t>(kept) * sizeof(int64_t),
                   labels.data.data() + static_cast<size_t>(i) * sizeof(int64_t), sizeof(int64_t));
    }
    ++kept;
  }
  coords.data.resize(static_cast<size_t>(kept) * 4 * sizeof(float));
  labels.data.resize(static_cast<size_t>(kept) * sizeof(int64_t));
  coords.rows = kept;
  labels.rows = kept;
  return static_cast<int>(count - kept);
}

}  // namespace sluice

#include "pipeline/geometry_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sluice {
namespace {

// The image the ops so far would have made: `cols` x `rows` pixels covering the window (x0, y0,
// w, h) of the source, mirrored as the flips say.
struct Virtual {
  double x0, y0, w, h;
  int cols, rows;
  bool flip_h = false, flip_v = false;
  // The part of the source every crop so far kept (source pixels): BoxMap::clip.
  double clip_x0, clip_y0, clip_x1, clip_y1;

  // Keeps the part (left, top, width, height) of the current image (it may reach outside it:
  // padding).
  void Crop(int left, int top, int width, int height) {
    const double sx = w / cols, sy = h / rows;
    const double l = flip_h ? cols - left - width : left;
    const double t = flip_v ? rows - top - height : top;
    x0 += l * sx;
    y0 += t * sy;
    w = width * sx;
    h = height * sy;
    cols = width;
    rows = height;
    clip_x0 = std::max(clip_x0, x0);
    clip_y0 = std::max(clip_y0, y0);
    clip_x1 = std::max(clip_x0, std::min(clip_x1, x0 + w));
    clip_y1 = std::max(clip_y0, std::min(clip_y1, y0 + h));
  }
  void Resize(int width, int height) {
    cols = width;
    rows = height;
  }
};

// torchvision F.center_crop's offset along one axis: round((in - out) / 2), or, for a crop larger
// than the image, the padding on the left/top: -((out - in) // 2).
int CenterOffset(int in, int out) {
  return out <= in ? RoundHalfEven((in - out) / 2.0) : -((out - in) / 2);
}

// Rounds [begin, begin + size) of the source to whole pixels and clips it to [0, limit); returns
// the output pixels [out_begin, out_end) of `count` it covers.
void Clip(double begin, double size, int limit, int count, int* src_begin, int* src_end,
          int* out_begin, int* out_end) {
  int a = RoundHalfEven(begin);
  int b = RoundHalfEven(begin + size);
  // Each edge to its nearest pixel (closer to torchvision's two resamplings than rounding the
  // start and the size: tests/python/test_torchvision_chain.py measures it).
  if (b <= a) b = a + 1;  // a window under half a pixel still reads one
  const int ca = std::clamp(a, 0, limit);
  const int cb = std::clamp(b, 0, limit);
  if (ca == a && cb == b) {
    *src_begin = a;
    *src_end = b;
    *out_begin = 0;
    *out_end = count;
    return;
  }
  const double per_out = size / count;
  *src_begin = ca;
  *src_end = cb;
  *out_begin = std::clamp(RoundHalfEven((ca - begin) / per_out), 0, count);
  *out_end = std::clamp(RoundHalfEven((cb - begin) / per_out), 0, count);
  if (cb <= ca || *out_end <= *out_begin) *src_end = *src_begin, *out_end = *out_begin;
}

}  // namespace

GeometryPlan PlanGeometry(const std::vector<GeometryOp>& ops, int width, int height, int out_width,
                          int out_height, AugmentRng& rng) {
  const double source_w = width, source_h = height;
  Virtual v{0, 0, source_w, source_h, width, height, false, false, 0, 0, source_w, source_h};
  GeometryPlan plan;
  for (const GeometryOp& g : ops) {
    switch (g.kind) {
      case GeometryOp::Kind::kPresetTrain: {
        const CropWindow c = RandomResizedCrop(v.cols, v.rows, RandomResizedCropParams{}, rng);
        const bool flip = (rng.NextU64() & 1) != 0;
        v.Crop(c.x, c.y, c.width, c.height);
        v.Resize(g.width, g.height);
        v.flip_h ^= flip;
        plan.resize.filter = ResizeFilter::kBilinear;
        break;
      }
      case GeometryOp::Kind::kPresetEval: {
        const CropWindow c = CenterCrop(v.cols, v.rows, g.width, g.height);
        v.Crop(c.x, c.y, c.width, c.height);
        v.Resize(g.width, g.height);
        plan.resize.filter = ResizeFilter::kBilinear;
        break;
      }
      case GeometryOp::Kind::kRandomResizedCrop: {
        const CropWindow c = RandomResizedCrop(v.cols, v.rows, g.crop, rng);
        v.Crop(c.x, c.y, c.width, c.height);
        v.Resize(g.width, g.height);
        plan.resize.filter = g.filter;
        break;
      }
      case GeometryOp::Kind::kResize:
        if (g.shorter_side > 0) {
          // torchvision: the shorter side becomes shorter_side, the longer int(s * long / short).
          const bool wide = v.cols > v.rows;
          const int shorter = wide ? v.rows : v.cols;
          const int longer = wide ? v.cols : v.rows;
          const int new_long =
              static_cast<int>(static_cast<double>(g.shorter_side) * longer / shorter);
          const int new_long_clamped = std::max(1, new_long);
          if (wide) {
            v.Resize(new_long_clamped, g.shorter_side);
          } else {
            v.Resize(g.shorter_side, new_long_clamped);
          }
        } else {
          v.Resize(g.width, g.height);
        }
        plan.resize.filter = g.filter;
        break;
      case GeometryOp::Kind::kCenterCrop:
        v.Crop(CenterOffset(v.cols, g.width), CenterOffset(v.rows, g.height), g.width, g.height);
        break;
      case GeometryOp::Kind::kRandomCrop: {
        // torchvision pads every side, then draws the row, then the column. A window larger than
        // the padded image (torchvision raises) is centred on it.
        const int padded_cols = v.cols + 2 * g.padding;
        const int padded_rows = v.rows + 2 * g.padding;
        const int top = padded_rows >= g.height ? UniformInt(rng, padded_rows - g.height)
                                                : -((g.height - padded_rows) / 2);
        const int left = padded_cols >= g.width ? UniformInt(rng, padded_cols - g.width)
                                                : -((g.width - padded_cols) / 2);
        v.Crop(left - g.padding, top - g.padding, g.width, g.height);
        break;
      }
      case GeometryOp::Kind::kFlip:
        v.flip_h ^= Bernoulli(rng, g.horizontal_p);
        v.flip_v ^= Bernoulli(rng, g.vertical_p);
        break;
    }
  }
  // v.cols x v.rows is out_width x out_height (CompileTransforms checked the list ends there).
  int sx0, sx1, ux0, ux1, sy0, sy1, uy0, uy1;
  Clip(v.x0, v.w, width, out_width, &sx0, &sx1, &ux0, &ux1);
  Clip(v.y0, v.h, height, out_height, &sy0, &sy1, &uy0, &uy1);
  plan.source = CropWindow{sx0, sy0, sx1 - sx0, sy1 - sy0};
  // The output is mirrored as a whole, so the covered part moves to the other side.
  const int dx = v.flip_h ? out_width - ux1 : ux0;
  const int dy = v.flip_v ? out_height - uy1 : uy0;
  plan.dest = CropWindow{dx, dy, ux1 - ux0, uy1 - uy0};
  if (plan.source.width == 0 || plan.source.height == 0) plan.dest = CropWindow{0, 0, 0, 0};
  plan.resize.flip_horizontal = v.flip_h;
  plan.resize.flip_vertical = v.flip_v;
  // The clip starts as the whole image, so padding a crop reaches into is never in it.
  plan.box_map = BoxMap{v.x0 / source_w,
                        v.y0 / source_h,
                        v.w / source_w,
                        v.h / source_h,
                        v.flip_h,
                        v.flip_v,
                        v.clip_x0 / source_w,
                        v.clip_y0 / source_h,
                        v.clip_x1 / source_w,
                        v.clip_y1 / source_h};
  return plan;
}

void ClearPadding(const GeometryPlan& plan, int out_width, int out_height, uint8_t* target) {
  if (plan.pads(out_width, out_height)) {
    std::memset(target, 0, static_cast<size_t>(out_width) * out_height * 3);
  }
}

uint8_t* DestPixels(const GeometryPlan& plan, int out_width, uint8_t* target) {
  return target + (static_cast<size_t>(plan.dest.y) * out_width + plan.dest.x) * 3;
}

void RenderGeometry(const ImageView& image, const GeometryPlan& plan, int out_width, int out_height,
                    uint8_t* target) {
  ClearPadding(plan, out_width, out_height, target);
  if (plan.dest.width == 0) return;
  Resize(image.Crop(plan.source.x, plan.source.y, plan.source.width, plan.source.height),
         DestPixels(plan, out_width, target), plan.dest.width, plan.dest.height,
         static_cast<size_t>(out_width) * 3, plan.resize);
}

}  // namespace sluice

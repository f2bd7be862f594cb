// PlanGeometry's BoxMap against the pixels the plan renders: a white rectangle drawn into the
// source lands, after RenderGeometry, where TransformBoxes puts the same rectangle as a box, for
// every geometric op (and the chains whose crops clip one another).
#include "pipeline/geometry_plan.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/box_transform.h"

namespace sluice {
namespace {

constexpr int kWidth = 240, kHeight = 180;

GeometryOp Op(GeometryOp::Kind kind, int width = 0, int height = 0) {
  GeometryOp g;
  g.kind = kind;
  g.width = width;
  g.height = height;
  return g;
}

GeometryOp RandomCrop(int size, int padding) {
  GeometryOp g = Op(GeometryOp::Kind::kRandomCrop, size, size);
  g.padding = padding;
  return g;
}

GeometryOp Flip(double h, double v) {
  GeometryOp g = Op(GeometryOp::Kind::kFlip);
  g.horizontal_p = h;
  g.vertical_p = v;
  return g;
}

GeometryOp ShorterSide(int side) {
  GeometryOp g = Op(GeometryOp::Kind::kResize);
  g.shorter_side = side;
  return g;
}

struct Chain {
  std::string name;
  std::vector<GeometryOp> ops;
  int out_width, out_height;
  // RenderGeometry clips its window to the image only: a crop padded past an earlier crop shows
  // the source pixels that crop cut off (torchvision shows zeros there), while the BoxMap clips
  // at both, as torchvision clamps the boxes. Its boxes are checked against torchvision
  // (tests/python/test_torchvision_boxes.py) and its clip in box_transform_test.cc.
  bool pixels_follow_every_crop = true;
};

std::vector<Chain> Chains() {
  using K = GeometryOp::Kind;
  return {
      {"preset train", {Op(K::kPresetTrain, 64, 64)}, 64, 64},
      {"preset eval", {Op(K::kPresetEval, 64, 64)}, 64, 64},
      {"random_resized_crop, flips", {Op(K::kRandomResizedCrop, 48, 64), Flip(0.5, 0.5)}, 48, 64},
      {"resize shorter side, center_crop", {ShorterSide(80), Op(K::kCenterCrop, 64, 64)}, 64, 64},
      {"center_crop larger than the image", {Op(K::kCenterCrop, 300, 200)}, 300, 200},
      {"random_crop with padding, flips", {RandomCrop(100, 30), Flip(1, 1)}, 100, 100},
      {"center_crop, random_crop padded past it",
       {Op(K::kCenterCrop, 120, 120), RandomCrop(100, 30), Flip(0.5, 0)},
       100,
       100,
       false},
      {"resize, padded random_crop, resize",
       {Op(K::kResize, 96, 72), RandomCrop(64, 8), Op(K::kResize, 32, 32)},
       32,
       32},
  };
}

struct PixelBox {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // x1, y1 exclusive
};

// Source pixels [x0, x1) x [y0, y1) white, the rest black.
Image Rectangle(const PixelBox& b) {
  Image img;
  img.Resize(kWidth, kHeight);
  std::fill(img.pixels.begin(), img.pixels.end(), 0);
  for (int y = b.y0; y < b.y1; ++y) {
    std::fill(img.pixels.begin() + (static_cast<size_t>(y) * kWidth + b.x0) * 3,
              img.pixels.begin() + (static_cast<size_t>(y) * kWidth + b.x1) * 3, 255);
  }
  return img;
}

// The bounding box of the pixels at least half white; nullopt when there are none.
std::optional<PixelBox> WhiteBounds(const std::vector<uint8_t>& rgb, int width, int height) {
  std::optional<PixelBox> out;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      if (rgb[(static_cast<size_t>(y) * width + x) * 3] < 128) continue;
      if (!out) out = PixelBox{x, y, x + 1, y + 1};
      out->x0 = std::min(out->x0, x);
      out->y0 = std::min(out->y0, y);
      out->x1 = std::max(out->x1, x + 1);
      out->y1 = std::max(out->y1, y + 1);
    }
  }
  return out;
}

TEST_CASE("BoxMapPutsABoxWhereTheRenderedPlanPutsItsPixels") {
  // Inside, across the left and bottom edges, in the top-right corner.
  const PixelBox boxes[] = {{60, 40, 150, 130}, {0, 100, 110, 180}, {200, 5, 238, 60}};
  BoxColumns columns;
  columns.enabled = true;
  columns.min_size = 2;  // below two pixels a box's rendered edge is blurred to under half white
  for (const Chain& chain : Chains()) {
    if (!chain.pixels_follow_every_crop) continue;
    int kept = 0;
    for (const PixelBox& box : boxes) {
      const Image source = Rectangle(box);
      for (uint64_t stream = 0; stream < 12; ++stream) {
        INFO(chain.name << ", box " << box.x0 << "," << box.y0 << "," << box.x1 << "," << box.y1
                        << ", stream " << stream);
        AugmentRng rng(5, stream);
        const GeometryPlan plan =
            PlanGeometry(chain.ops, kWidth, kHeight, chain.out_width, chain.out_height, rng);
        std::vector<uint8_t> out(static_cast<size_t>(chain.out_width) * chain.out_height * 3);
        RenderGeometry(source.view(), plan, chain.out_width, chain.out_height, out.data());
        const std::optional<PixelBox> rendered =
            WhiteBounds(out, chain.out_width, chain.out_height);

        SampleFeatures f;
        f.Reset(2);
        const float coords[4] = {
            static_cast<float>(box.x0) / kWidth, static_cast<float>(box.y0) / kHeight,
            static_cast<float>(box.x1) / kWidth, static_cast<float>(box.y1) / kHeight};
        const int64_t label = 3;
        f.arrays[0].data.assign(reinterpret_cast<const char*>(coords), sizeof(coords));
        f.arrays[1].data.assign(reinterpret_cast<const char*>(&label), sizeof(label));
        f.arrays[0].rows = f.arrays[1].rows = 1;
        if (TransformBoxes(plan.box_map, columns, chain.out_width, chain.out_height, 0, &f) == 1) {
          // Nothing, or a sliver under min_size + 1 pixels of (blurred) edge, was rendered.
          if (rendered) {
            CHECK(std::min(rendered->x1 - rendered->x0, rendered->y1 - rendered->y0) <= 3);
          }
          continue;
        }
        ++kept;
        REQUIRE(rendered);
        float b[4];
        std::memcpy(b, f.arrays[0].data.data(), sizeof(b));
        // Within a pixel: the plan rounds its windows to whole source pixels and the resampled
        // edge is blurred over a pixel, thresholded at half white.
        CHECK(std::abs(b[0] * chain.out_width - rendered->x0) <= 1.0);
        CHECK(std::abs(b[2] * chain.out_width - rendered->x1) <= 1.0);
        CHECK(std::abs(b[1] * chain.out_height - rendered->y0) <= 1.0);
        CHECK(std::abs(b[3] * chain.out_height - rendered->y1) <= 1.0);
      }
    }
    INFO(chain.name);
    CHECK(kept > 0);
  }
}

TEST_CASE("BoxMapOfOneCropIsItsExactSourceWindowAndFlips") {
  // A single op is exact (no rounding): the map's window is the plan's source window.
  for (const Chain& chain : Chains()) {
    if (chain.ops.size() != 1 && chain.ops[1].kind != GeometryOp::Kind::kFlip) continue;
    for (uint64_t stream = 0; stream < 12; ++stream) {
      INFO(chain.name << ", stream " << stream);
      AugmentRng rng(9, stream);
      const GeometryPlan plan =
          PlanGeometry(chain.ops, kWidth, kHeight, chain.out_width, chain.out_height, rng);
      const BoxMap& m = plan.box_map;
      CHECK(m.flip_x == plan.resize.flip_horizontal);
      CHECK(m.flip_y == plan.resize.flip_vertical);
      // The window clipped to the image is the source the plan reads.
      CHECK(std::max(0.0, m.x0) * kWidth == Approx(plan.source.x).margin(1e-9));
      CHECK(std::max(0.0, m.y0) * kHeight == Approx(plan.source.y).margin(1e-9));
      CHECK(std::min(1.0, m.x0 + m.width) * kWidth ==
            Approx(plan.source.x + plan.source.width).margin(1e-9));
      CHECK(std::min(1.0, m.y0 + m.height) * kHeight ==
            Approx(plan.source.y + plan.source.height).margin(1e-9));
      // One crop: the clip is that window within the image.
      CHECK(m.clip_x0 == std::max(0.0, m.x0));
      CHECK(m.clip_y0 == std::max(0.0, m.y0));
      CHECK(m.clip_x1 == Approx(std::min(1.0, m.x0 + m.width)));
      CHECK(m.clip_y1 == Approx(std::min(1.0, m.y0 + m.height)));
    }
  }
}

TEST_CASE("BoxMapOfAResizeOnlyIsTheWholeImage") {
  GeometryOp resize = Op(GeometryOp::Kind::kResize, 50, 70);
  AugmentRng rng(1, 0);
  const BoxMap m = PlanGeometry({resize}, kWidth, kHeight, 50, 70, rng).box_map;
  CHECK(m.x0 == 0);
  CHECK(m.y0 == 0);
  CHECK(m.width == 1);
  CHECK(m.height == 1);
  CHECK(m.clip_x0 == 0);
  CHECK(m.clip_y0 == 0);
  CHECK(m.clip_x1 == 1);
  CHECK(m.clip_y1 == 1);
}

}  // namespace
}  // namespace sluice

// TransformBoxes: boxes clamped to what every crop kept, mapped to the output, mirrored by the
// flips, and dropped by min_overlap and min_size, their labels kept alongside.
#include "pipeline/box_transform.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

namespace sluice {
namespace {

struct Box {
  float x0, y0, x1, y1;
  int64_t label;
};

SampleFeatures WithBoxes(const std::vector<Box>& boxes) {
  SampleFeatures f;
  f.Reset(2);
  for (const Box& b : boxes) {
    const float c[4] = {b.x0, b.y0, b.x1, b.y1};
    f.arrays[0].data.append(reinterpret_cast<const char*>(c), sizeof(c));
    f.arrays[1].data.append(reinterpret_cast<const char*>(&b.label), sizeof(b.label));
  }
  f.arrays[0].rows = f.arrays[1].rows = static_cast<uint32_t>(boxes.size());
  return f;
}

std::vector<Box> BoxesOf(const SampleFeatures& f) {
  REQUIRE(f.arrays[0].rows == f.arrays[1].rows);
  REQUIRE(f.arrays[0].data.size() == f.arrays[0].rows * 16u);
  REQUIRE(f.arrays[1].data.size() == f.arrays[1].rows * 8u);
  std::vector<Box> out(f.arrays[0].rows);
  for (size_t i = 0; i < out.size(); ++i) {
    std::memcpy(&out[i].x0, f.arrays[0].data.data() + i * 16, 16);
    std::memcpy(&out[i].label, f.arrays[1].data.data() + i * 8, 8);
  }
  return out;
}

BoxColumns Columns(double min_size = 1, double min_overlap = 0) {
  BoxColumns c;
  c.enabled = true;
  c.min_size = min_size;
  c.min_overlap = min_overlap;
  return c;
}

// The source window [0.25, 0.75] x [0.5, 1] resampled to the whole output: one crop.
BoxMap QuarterCrop() {
  BoxMap m;
  m.x0 = 0.25, m.y0 = 0.5, m.width = 0.5, m.height = 0.5;
  m.clip_x0 = 0.25, m.clip_y0 = 0.5, m.clip_x1 = 0.75, m.clip_y1 = 1;
  return m;
}

void CheckBox(const Box& got, const Box& want) {
  INFO(got.x0 << " " << got.y0 << " " << got.x1 << " " << got.y1 << " label " << got.label);
  CHECK(got.x0 == Approx(want.x0).margin(1e-6));
  CHECK(got.y0 == Approx(want.y0).margin(1e-6));
  CHECK(got.x1 == Approx(want.x1).margin(1e-6));
  CHECK(got.y1 == Approx(want.y1).margin(1e-6));
  CHECK(got.label == want.label);
}

TEST_CASE("BoxIsClampedToTheCropAndNormalizedToTheOutput") {
  SampleFeatures f = WithBoxes({{0.5f, 0.75f, 0.625f, 0.875f, 7}, {0.f, 0.f, 0.5f, 0.75f, 8}});
  CHECK(TransformBoxes(QuarterCrop(), Columns(), 100, 100, 0, &f) == 0);
  const std::vector<Box> out = BoxesOf(f);
  REQUIRE(out.size() == 2);
  CheckBox(out[0], {0.5f, 0.5f, 0.75f, 0.75f, 7});
  // Half inside on x, half on y: clamped to the crop's corner.
  CheckBox(out[1], {0.f, 0.f, 0.5f, 0.5f, 8});
}

TEST_CASE("BoxWithNothingInsideTheCropIsDroppedEvenWithMinOverlapZero") {
  // Wholly outside, and touching the crop's edge only (area 0 left inside).
  SampleFeatures f = WithBoxes({{0.f, 0.f, 0.2f, 0.2f, 1}, {0.f, 0.5f, 0.25f, 1.f, 2}});
  CHECK(TransformBoxes(QuarterCrop(), Columns(/*min_size=*/0), 100, 100, 0, &f) == 2);
  CHECK(BoxesOf(f).empty());
}

TEST_CASE("BoxBelowMinOverlapIsDroppedAndOneAtItIsKept") {
  // 0.5 of the first box's area is inside the crop, 0.25 of the second's.
  SampleFeatures f = WithBoxes({{0.5f, 0.25f, 0.75f, 0.75f, 1}, {0.125f, 0.25f, 0.375f, 0.75f, 2}});
  CHECK(TransformBoxes(QuarterCrop(), Columns(1, 0.5), 100, 100, 0, &f) == 1);
  const std::vector<Box> out = BoxesOf(f);
  REQUIRE(out.size() == 1);
  CheckBox(out[0], {0.5f, 0.f, 1.f, 0.5f, 1});
}

TEST_CASE("BoxNarrowerOrLowerThanMinSizeOutputPixelsIsDropped") {
  BoxMap whole;  // identity, 200 x 100 output
  // 0.01 * 200 = 2 px wide (kept at min_size 2), 0.005 * 200 = 1 px (dropped); 0.02 * 100 = 2 px
  // high (kept), 0.015 * 100 = 1.5 px (dropped).
  SampleFeatures f = WithBoxes({{0.1f, 0.1f, 0.11f, 0.5f, 1},
                                {0.1f, 0.1f, 0.105f, 0.5f, 2},
                                {0.1f, 0.1f, 0.5f, 0.12f, 3},
                                {0.1f, 0.1f, 0.5f, 0.115f, 4}});
  CHECK(TransformBoxes(whole, Columns(/*min_size=*/2), 200, 100, 0, &f) == 2);
  const std::vector<Box> out = BoxesOf(f);
  REQUIRE(out.size() == 2);
  CHECK(out[0].label == 1);
  CHECK(out[1].label == 3);
}

TEST_CASE("MinSizeCountsThePixelsLeftAfterTheClamp") {
  // 0.4 wide in the source, but only 0.01 of it inside the crop: 0.02 of the output, 2 of 100 px.
  SampleFeatures f = WithBoxes({{0.74f, 0.6f, 1.f, 0.9f, 1}});
  CHECK(TransformBoxes(QuarterCrop(), Columns(3), 100, 100, 0, &f) == 1);
  f = WithBoxes({{0.74f, 0.6f, 1.f, 0.9f, 1}});
  CHECK(TransformBoxes(QuarterCrop(), Columns(2), 100, 100, 0, &f) == 0);
}

TEST_CASE("HorizontalAndVerticalFlipsMirrorAndSwapMinAndMax") {
  BoxMap m = QuarterCrop();
  SECTION("horizontal") {
    m.flip_x = true;
    SampleFeatures f = WithBoxes({{0.5f, 0.75f, 0.625f, 0.875f, 7}});
    TransformBoxes(m, Columns(), 100, 100, 0, &f);
    CheckBox(BoxesOf(f).at(0), {0.25f, 0.5f, 0.5f, 0.75f, 7});
  }
  SECTION("vertical") {
    m.flip_y = true;
    SampleFeatures f = WithBoxes({{0.5f, 0.75f, 0.625f, 0.875f, 7}});
    TransformBoxes(m, Columns(), 100, 100, 0, &f);
    CheckBox(BoxesOf(f).at(0), {0.5f, 0.25f, 0.75f, 0.5f, 7});
  }
  SECTION("both") {
    m.flip_x = m.flip_y = true;
    SampleFeatures f = WithBoxes({{0.25f, 0.5f, 0.375f, 0.625f, 7}});
    TransformBoxes(m, Columns(), 100, 100, 0, &f);
    CheckBox(BoxesOf(f).at(0), {0.75f, 0.75f, 1.f, 1.f, 7});
  }
}

TEST_CASE("ZeroAreaBoxIsKeptInsideTheClipOnlyWithMinSizeZero") {
  auto run = [](double min_size) {
    SampleFeatures f = WithBoxes({{0.5f, 0.75f, 0.5f, 0.75f, 1},  // a point inside
                                  {0.5f, 0.6f, 0.5f, 0.9f, 2},    // a vertical line inside
                                  {0.1f, 0.75f, 0.1f, 0.75f, 3},  // a point outside
                                  {0.75f, 1.f, 0.75f, 1.f, 4}});  // on the clip's corner
    const int dropped = TransformBoxes(QuarterCrop(), Columns(min_size), 100, 100, 0, &f);
    return std::make_pair(dropped, BoxesOf(f));
  };
  auto [dropped, kept] = run(0);
  CHECK(dropped == 1);
  REQUIRE(kept.size() == 3);
  CheckBox(kept[0], {0.5f, 0.5f, 0.5f, 0.5f, 1});
  CheckBox(kept[1], {0.5f, 0.2f, 0.5f, 0.8f, 2});
  CheckBox(kept[2], {1.f, 1.f, 1.f, 1.f, 4});
  // min_overlap cannot drop a zero-area box inside the clip (its overlap is 1).
  auto [dropped_sized, kept_sized] = run(1);
  CHECK(dropped_sized == 4);
  CHECK(kept_sized.empty());
}

TEST_CASE("LabelsStayAlignedWithTheBoxesKeptInTheirOrder") {
  std::vector<Box> in;
  for (int i = 0; i < 20; ++i) {
    const float x = 0.05f * i;  // every other one starts outside [0.25, 0.75)
    in.push_back({x, 0.6f, x + 0.04f, 0.9f, 100 + i});
  }
  SampleFeatures f = WithBoxes(in);
  const int dropped = TransformBoxes(QuarterCrop(), Columns(), 100, 100, 0, &f);
  const std::vector<Box> out = BoxesOf(f);
  CHECK(dropped + static_cast<int>(out.size()) == 20);
  REQUIRE(out.size() == 10);  // x in [0.25, 0.7]
  for (size_t i = 0; i < out.size(); ++i) {
    const int source = static_cast<int>(out[i].label) - 100;
    CHECK(source == static_cast<int>(i) + 5);
    CHECK(out[i].x0 == Approx((0.05 * source - 0.25) / 0.5).margin(1e-6));
  }
}

TEST_CASE("BoxesAfterTheFeatureColumnsAreTheOnesRewritten") {
  SampleFeatures f = WithBoxes({{0.f, 0.f, 0.1f, 0.1f, 1}});
  f.arrays.insert(f.arrays.begin(), FeatureValues{"abc", {3}, 1});
  CHECK(TransformBoxes(QuarterCrop(), Columns(), 100, 100, 1, &f) == 1);
  CHECK(f.arrays[0].data == "abc");
  CHECK(f.arrays[1].rows == 0);
  CHECK(f.arrays[2].rows == 0);
}

TEST_CASE("ACropReachingIntoPaddingClipsBoxesAtTheEarlierCropAndTheImage") {
  // center_crop 100x100 of a 200x200 image (source [50, 150]), then random_crop 100x100 with
  // padding 40: every window reaches past the first crop, where the source still has pixels but
  // the first crop (torchvision: clamps its boxes) kept none. The clip is their intersection.
  std::vector<GeometryOp> ops(2);
  ops[0].kind = GeometryOp::Kind::kCenterCrop;
  ops[0].width = ops[0].height = 100;
  ops[1].kind = GeometryOp::Kind::kRandomCrop;
  ops[1].width = ops[1].height = 100;
  ops[1].padding = 40;
  int shifted = 0;
  for (uint64_t stream = 0; stream < 32; ++stream) {
    AugmentRng rng(11, stream);
    const GeometryPlan plan = PlanGeometry(ops, 200, 200, 100, 100, rng);
    const BoxMap& m = plan.box_map;
    CHECK(m.width == 0.5);
    CHECK(m.clip_x0 == std::max(0.25, m.x0));
    CHECK(m.clip_x1 == Approx(std::min(0.75, m.x0 + 0.5)));
    CHECK(m.clip_y0 == std::max(0.25, m.y0));
    CHECK(m.clip_y1 == Approx(std::min(0.75, m.y0 + 0.5)));
    shifted += m.x0 != 0.25 ? 1 : 0;
    // A box over the whole image keeps exactly the clip.
    SampleFeatures f = WithBoxes({{0.f, 0.f, 1.f, 1.f, 5}});
    REQUIRE(TransformBoxes(m, Columns(), 100, 100, 0, &f) == 0);
    const Box b = BoxesOf(f).at(0);
    CHECK(b.x0 == Approx((m.clip_x0 - m.x0) / 0.5).margin(1e-6));
    CHECK(b.x1 == Approx((m.clip_x1 - m.x0) / 0.5).margin(1e-6));
    CHECK(b.y0 == Approx((m.clip_y0 - m.y0) / 0.5).margin(1e-6));
    CHECK(b.y1 == Approx((m.clip_y1 - m.y0) / 0.5).margin(1e-6));
  }
  CHECK(shifted > 16);
}

}  // namespace
}  // namespace sluice

// The policies' kernels (formats/policy_ops.cc) on the edge cases torchvision defines by name;
// tests/python/test_torchvision_policy.py compares them with torchvision pixel for pixel.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "formats/image_ops.h"
#include "formats/pixel_ops.h"
#include "tests/formats/test_images.h"

namespace sluice {
namespace {

using testing::At;
using testing::Filled;
using testing::Mutable;
using testing::RandomImage;

Image Affine(const Image& src, double angle, double tx, double ty, double shear_x, double shear_y,
             bool center_at_origin) {
  Image dst;
  dst.Resize(src.width, src.height);
  AffineNearest(src.view(), Mutable(dst), angle, tx, ty, shear_x, shear_y, center_at_origin);
  return dst;
}

TEST_CASE("ConstantImageThroughAutoContrastIsUnchanged") {
  Image img = Filled(9, 7, 17, 200, 255);
  const Image before = img;
  AutoContrast(Mutable(img));
  CHECK(img.pixels == before.pixels);
}

TEST_CASE("AutoContrastStretchesEachChannelToTheFullRange") {
  Image img = Filled(4, 1, 50, 60, 70);
  img.pixels[3 * 3 + 0] = 150;  // R spans 50..150, G 60..60 (constant), B 70..70
  AutoContrast(Mutable(img));
  CHECK(At(img, 0, 0, 0) == 0);
  CHECK(At(img, 3, 0, 0) == 255);
  CHECK(At(img, 0, 0, 1) == 60);
  CHECK(At(img, 0, 0, 2) == 70);
}

TEST_CASE("EqualizeOfAOneValueChannelLeavesItUnchanged") {
  Image img = RandomImage(16, 16, 3);
  for (size_t i = 1; i < img.pixels.size(); i += 3) img.pixels[i] = 99;
  const Image before = img;
  Equalize(Mutable(img));
  bool red_changed = false;
  for (size_t i = 0; i < img.pixels.size(); i += 3) {
    REQUIRE(img.pixels[i + 1] == 99);
    red_changed = red_changed || img.pixels[i] != before.pixels[i];
  }
  CHECK(red_changed);
}

TEST_CASE("EqualizeOfAChannelAlmostAllAtItsTopValueIsUnchanged") {
  // 254 pixels below the top value: step = 254 // 255 = 0, torchvision's early return.
  Image img = Filled(255, 1, 255, 255, 255);
  for (int x = 0; x < 254; ++x) img.pixels[3 * x] = static_cast<uint8_t>(x);
  const Image before = img;
  Equalize(Mutable(img));
  CHECK(img.pixels == before.pixels);
}

TEST_CASE("SharpnessOneIsIdentity") {
  Image img = RandomImage(13, 11, 5);
  const Image before = img;
  std::vector<uint8_t> scratch;
  AdjustSharpness(Mutable(img), 1.0, &scratch);
  CHECK(img.pixels == before.pixels);
}

TEST_CASE("SharpnessOfAnImageTwoPixelsHighIsIdentity") {
  Image img = RandomImage(13, 2, 6);
  const Image before = img;
  std::vector<uint8_t> scratch;
  AdjustSharpness(Mutable(img), 0.0, &scratch);
  CHECK(img.pixels == before.pixels);
}

TEST_CASE("SharpnessZeroIsTheBlurInsideAndKeepsTheBorder") {
  Image img = Filled(3, 3, 0, 0, 0);
  for (int c = 0; c < 3; ++c) img.pixels[3 * 4 + c] = 130;  // the centre only
  std::vector<uint8_t> scratch;
  AdjustSharpness(Mutable(img), 0.0, &scratch);
  CHECK(At(img, 1, 1, 0) == 50);  // 130 * 5 / 13
  CHECK(At(img, 0, 0, 0) == 0);
  CHECK(At(img, 2, 1, 2) == 0);
}

TEST_CASE("AffineIdentityCopiesTheImage") {
  for (int w : {1, 8, 9}) {
    for (int h : {1, 6, 7}) {
      const Image src = RandomImage(w, h, static_cast<uint32_t>(w * 100 + h));
      CHECK(Affine(src, 0, 0, 0, 0, 0, false).pixels == src.pixels);
      CHECK(Affine(src, 0, 0, 0, 0, 0, true).pixels == src.pixels);
    }
  }
}

TEST_CASE("Rotate90OfASquareIsATransposeAndFlip") {
  // Counter-clockwise, as F.rotate: the top-right corner comes to the top left.
  const Image src = RandomImage(6, 6, 7);
  const Image dst = Affine(src, 90, 0, 0, 0, 0, false);
  for (int y = 0; y < 6; ++y) {
    for (int x = 0; x < 6; ++x) {
      for (int c = 0; c < 3; ++c) REQUIRE(At(dst, x, y, c) == At(src, 5 - y, x, c));
    }
  }
}

TEST_CASE("TranslateByWholePixelsShiftsAndFillsZero") {
  const Image src = RandomImage(5, 4, 8);
  const Image dst = Affine(src, 0, 2, -1, 0, 0, false);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 5; ++x) {
      const int sx = x - 2;
      const int sy = y + 1;
      const bool inside = sx >= 0 && sy < 4;
      for (int c = 0; c < 3; ++c) REQUIRE(At(dst, x, y, c) == (inside ? At(src, sx, sy, c) : 0));
    }
  }
}

TEST_CASE("ShearYAtTheOriginKeepsTheLeftColumn") {
  // center=[0, 0] is the top-left corner: a shear along y moves columns by their distance from
  // it, and the first column (centre 0.5 from it) by less than half a pixel.
  const Image src = RandomImage(8, 8, 9);
  const Image dst = Affine(src, 0, 0, 0, 0, -30, true);
  for (int y = 0; y < 8; ++y) {
    for (int c = 0; c < 3; ++c) REQUIRE(At(dst, 0, y, c) == At(src, 0, y, c));
  }
  CHECK(dst.pixels != src.pixels);
}

}  // namespace
}  // namespace sluice

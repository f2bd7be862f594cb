#include "formats/crop_window.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

namespace sluice {
namespace {

void RequireInside(const CropWindow& c, int width, int height) {
  INFO("window " << c.width << "x" << c.height << "+" << c.x << "+" << c.y << " in " << width << "x"
                 << height);
  REQUIRE(c.x >= 0);
  REQUIRE(c.y >= 0);
  REQUIRE(c.width >= 1);
  REQUIRE(c.height >= 1);
  REQUIRE(c.x + c.width <= width);
  REQUIRE(c.y + c.height <= height);
}

// The window torchvision falls back to after the attempts run out.
CropWindow Fallback(int width, int height, const RandomResizedCropParams& p) {
  RandomResizedCropParams none = p;
  none.attempts = 0;
  AugmentRng rng(0, 0);
  return RandomResizedCrop(width, height, none, rng);
}

const std::vector<std::pair<int, int>> kSizes = {
    {1, 1}, {1, 1000}, {1000, 1}, {2, 3}, {7, 13}, {500, 375}, {375, 500}, {640, 480}, {4000, 30},
};

TEST_CASE("NextDoubleIsInTheUnitIntervalAndUniform") {
  AugmentRng rng(42, 7);
  double sum = 0;
  int low = 0;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    const double v = rng.NextDouble();
    REQUIRE(v >= 0.0);
    REQUIRE(v < 1.0);
    sum += v;
    if (v < 0.25) ++low;
  }
  CHECK(sum / kDraws == Approx(0.5).margin(0.01));
  CHECK(static_cast<double>(low) / kDraws == Approx(0.25).margin(0.01));
}

TEST_CASE("SameSeedAndStreamGiveTheSameNumbers") {
  AugmentRng a(123, 456);
  AugmentRng b(123, 456);
  for (int i = 0; i < 1000; ++i) REQUIRE(a.NextU64() == b.NextU64());

  RandomResizedCropParams params;
  for (uint64_t stream = 0; stream < 200; ++stream) {
    AugmentRng r1(99, stream);
    AugmentRng r2(99, stream);
    REQUIRE(RandomResizedCrop(500, 375, params, r1) == RandomResizedCrop(500, 375, params, r2));
  }
}

TEST_CASE("DifferentStreamsAndSeedsGiveDifferentNumbers") {
  // Neighbouring streams (consecutive record positions) must not share or shift sequences.
  std::set<uint64_t> firsts;
  for (uint64_t stream = 0; stream < 1000; ++stream) {
    AugmentRng rng(5, stream);
    firsts.insert(rng.NextU64());
  }
  CHECK(firsts.size() == 1000);

  AugmentRng s0(5, 0);
  AugmentRng s1(5, 1);
  std::vector<uint64_t> a, b;
  for (int i = 0; i < 64; ++i) {
    a.push_back(s0.NextU64());
    b.push_back(s1.NextU64());
  }
  for (int shift = 0; shift < 32; ++shift) {
    CHECK(std::vector<uint64_t>(a.begin() + shift, a.begin() + shift + 32) !=
          std::vector<uint64_t>(b.begin(), b.begin() + 32));
  }

  AugmentRng seed1(1, 3);
  AugmentRng seed2(2, 3);
  CHECK(seed1.NextU64() != seed2.NextU64());

  // Crops differ too: most of 100 streams give distinct windows.
  std::set<std::pair<int, int>> origins;
  for (uint64_t stream = 0; stream < 100; ++stream) {
    AugmentRng rng(5, stream);
    const CropWindow c = RandomResizedCrop(500, 375, {}, rng);
    origins.insert({c.x, c.y});
  }
  CHECK(origins.size() > 90);
}

TEST_CASE("RandomResizedCropWindowsStayInsideTheImage") {
  const std::vector<RandomResizedCropParams> params = {
      {},
      {0.5, 1.0, 0.5, 2.0, 10},
      {1.0, 1.0, 1.0, 1.0, 10},    // the whole area at aspect 1: fits only square images
      {0.01, 0.02, 0.1, 10.0, 3},  // tiny and very stretched
      {0.08, 1.0, 3.0 / 4, 4.0 / 3, 1},
  };
  for (const auto& [width, height] : kSizes) {
    for (const auto& p : params) {
      for (uint64_t stream = 0; stream < 300; ++stream) {
        AugmentRng rng(17, stream);
        RequireInside(RandomResizedCrop(width, height, p, rng), width, height);
      }
    }
  }
}

TEST_CASE("RandomResizedCropAreaAndAspectWithinBoundsWhenNotTheFallback") {
  const RandomResizedCropParams p;
  // Mean area fraction of torchvision's get_params on these shapes, from 200,000 draws of its
  // Python code: large areas at a far aspect do not fit and are drawn again, hence below 0.54.
  struct Case {
    int width, height;
    double mean_area;
  };
  for (const Case& k :
       {Case{500, 375, 0.434}, {375, 500, 0.434}, {640, 480, 0.434}, {1000, 1000, 0.478}}) {
    const CropWindow fallback = Fallback(k.width, k.height, p);
    const double area = static_cast<double>(k.width) * k.height;
    double area_sum = 0;
    int drawn = 0;
    for (uint64_t stream = 0; stream < 4000; ++stream) {
      AugmentRng rng(3, stream);
      const CropWindow c = RandomResizedCrop(k.width, k.height, p, rng);
      RequireInside(c, k.width, k.height);
      if (c == fallback) continue;
      ++drawn;
      // w and h are each rounded to the nearest pixel: allow that much slack.
      const double w = c.width, h = c.height;
      INFO("window " << c.width << "x" << c.height << " in " << k.width << "x" << k.height);
      CHECK((w + 0.5) * (h + 0.5) / area >= p.min_area);
      CHECK((w - 0.5) * (h - 0.5) / area <= p.max_area);
      CHECK((w + 0.5) / (h - 0.5) >= p.min_aspect);
      CHECK((w - 0.5) / (h + 0.5) <= p.max_aspect);
      area_sum += w * h / area;
    }
    REQUIRE(drawn > 3900);
    CHECK(area_sum / drawn == Approx(k.mean_area).margin(0.015));
  }
}

TEST_CASE("RandomResizedCropOriginsCoverTheWholeRange") {
  // x and y are uniform over every position the window fits: both ends are reached.
  RandomResizedCropParams p{0.25, 0.25, 1.0, 1.0, 10};  // always 50x50 in 100x100
  bool x0 = false, x_end = false, y0 = false, y_end = false;
  for (uint64_t stream = 0; stream < 5000; ++stream) {
    AugmentRng rng(8, stream);
    const CropWindow c = RandomResizedCrop(100, 100, p, rng);
    REQUIRE(c.width == 50);
    REQUIRE(c.height == 50);
    x0 |= c.x == 0;
    x_end |= c.x == 50;
    y0 |= c.y == 0;
    y_end |= c.y == 50;
  }
  CHECK(x0);
  CHECK(x_end);
  CHECK(y0);
  CHECK(y_end);
}

TEST_CASE("ExtremeAspectImagesFallBackToTheCentredClampedAspect") {
  const RandomResizedCropParams p;
  // 1000x10: any window of at least 8% of the area at aspect <= 4/3 is taller than 10 rows, so
  // every attempt fails and the window is the full height at aspect 4/3, centred.
  for (uint64_t stream = 0; stream < 50; ++stream) {
    AugmentRng wide(1, stream);
    CHECK(RandomResizedCrop(1000, 10, p, wide) == CropWindow{493, 0, 13, 10});
    AugmentRng tall(1, stream);
    CHECK(RandomResizedCrop(10, 1000, p, tall) == CropWindow{0, 493, 10, 13});
  }
}

TEST_CASE("FallbackOfAnImageWithinTheAspectRangeIsTheWholeImage") {
  CHECK(Fallback(500, 375, {}) == CropWindow{0, 0, 500, 375});
  CHECK(Fallback(1, 1, {}) == CropWindow{0, 0, 1, 1});
  // Aspect 2 is trimmed to 4/3: 667 = round(500 * 4 / 3) columns, centred.
  CHECK(Fallback(1000, 500, {}) == CropWindow{166, 0, 667, 500});
}

TEST_CASE("OnePixelImageAlwaysGivesItsOnePixel") {
  for (uint64_t stream = 0; stream < 100; ++stream) {
    AugmentRng rng(4, stream);
    CHECK(RandomResizedCrop(1, 1, {}, rng) == CropWindow{0, 0, 1, 1});
  }
}

TEST_CASE("CenterCropOfASquareOutputFollowsTheShorterSideRule") {
  // 500x375 → shorter side 375 resized to 256, centre 224: 375 * 224 / 256 = 328.125 source
  // pixels, rounded to 328, offsets (500 - 328) / 2 = 86 and round(23.5) = 24 (half to even).
  CHECK(CenterCrop(500, 375, 224, 224) == CropWindow{86, 24, 328, 328});
  CHECK(CenterCrop(375, 500, 224, 224) == CropWindow{24, 86, 328, 328});
  // Scale-free: the same window whatever the output size.
  CHECK(CenterCrop(512, 512, 32, 32) == CropWindow{32, 32, 448, 448});
  CHECK(CenterCrop(512, 512, 1024, 1024) == CropWindow{32, 32, 448, 448});
}

TEST_CASE("CenterCropWindowsAreCentredInsideAndOfTheOutputAspect") {
  const std::vector<std::pair<int, int>> outputs = {{224, 224}, {320, 160}, {160, 320},  {1, 1},
                                                    {7, 3},     {1000, 10}, {3000, 2000}};
  for (const auto& [width, height] : kSizes) {
    for (const auto& [ow, oh] : outputs) {
      const CropWindow c = CenterCrop(width, height, ow, oh);
      INFO(width << "x" << height << " → " << ow << "x" << oh << ": window " << c.width << "x"
                 << c.height << "+" << c.x << "+" << c.y);
      RequireInside(c, width, height);
      // Centred: the margins on either side differ by at most one pixel.
      CHECK(std::abs((width - c.x - c.width) - c.x) <= 1);
      CHECK(std::abs((height - c.y - c.height) - c.y) <= 1);
      // The binding side is 224/256 of the image.
      const double fx = static_cast<double>(c.width) / width;
      const double fy = static_cast<double>(c.height) / height;
      const bool width_binds = static_cast<double>(ow) / width >= static_cast<double>(oh) / height;
      const double binding = width_binds ? fx : fy;
      const int binding_size = width_binds ? width : height;
      CHECK(std::abs(binding * binding_size - 0.875 * binding_size) <= 0.5 + 1e-9);
      // The output's aspect ratio, up to rounding each side to a pixel (and at least one pixel).
      if (c.width > 1 && c.height > 1) {
        const double aspect = static_cast<double>(ow) / oh;
        CHECK((c.width + 0.5) / (c.height - 0.5) >= aspect);
        CHECK((c.width - 0.5) / (c.height + 0.5) <= aspect);
      }
    }
  }
}

}  // namespace
}  // namespace sluice

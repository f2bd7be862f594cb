#include "formats/crop_window.h"

#include <algorithm>
#include <cmath>

namespace sluice {

double Uniform(AugmentRng& rng, double lo, double hi) { return lo + (hi - lo) * rng.NextDouble(); }

int UniformInt(AugmentRng& rng, int n) {
  const unsigned __int128 product =
      static_cast<unsigned __int128>(rng.NextU64()) * (static_cast<uint64_t>(n) + 1);
  return static_cast<int>(product >> 64);
}

bool Bernoulli(AugmentRng& rng, double p) {
  return p >= 1 || (p > 0 && rng.NextDouble() < p);
}

int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

CropWindow RandomResizedCrop(int width, int height, const RandomResizedCropParams& params,
                             AugmentRng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_min_aspect = std::log(params.min_aspect);
  const double log_max_aspect = std::log(params.max_aspect);
  for (int attempt = 0; attempt < params.attempts; ++attempt) {
    const double target_area = area * Uniform(rng, params.min_area, params.max_area);
    const double aspect = std::exp(Uniform(rng, log_min_aspect, log_max_aspect));
    const int w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      // torchvision draws the row before the column.
      const int y = UniformInt(rng, height - h);
      const int x = UniformInt(rng, width - w);
      return CropWindow{x, y, w, h};
    }
  }
  // Fallback: the whole image, trimmed to the nearest allowed aspect and centred.
  const double in_aspect = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (in_aspect < params.min_aspect) {
    h = std::clamp(RoundHalfEven(w / params.min_aspect), 1, height);
  } else if (in_aspect > params.max_aspect) {
    w = std::clamp(RoundHalfEven(h * params.max_aspect), 1, width);
  }
  return CropWindow{(width - w) / 2, (height - h) / 2, w, h};
}

// The ImageNet evaluation transform resizes so the shorter side is out * 256 / 224 and cuts the
// centre out x out. For any output shape we take the scale at which the resized image just covers
// out_width x out_height, enlarged by 256 / 224; for square outputs that is exactly the shorter
// side rule. In source pixels the window is then 224 / 256 of the image along the side that binds,
// with the output's aspect ratio, centred (offsets rounded as torchvision's CenterCrop does).
CropWindow CenterCrop(int width, int height, int out_width, int out_height) {
  constexpr double kCropFraction = 224.0 / 256.0;
  const double cover =
      std::max(static_cast<double>(out_width) / width, static_cast<double>(out_height) / height);
  const double source_per_output = kCropFraction / cover;
  const int w = std::clamp(RoundHalfEven(out_width * source_per_output), 1, width);
  const int h = std::clamp(RoundHalfEven(out_height * source_per_output), 1, height);
  return CropWindow{RoundHalfEven((width - w) / 2.0), RoundHalfEven((height - h) / 2.0), w, h};
}

}  // namespace sluice

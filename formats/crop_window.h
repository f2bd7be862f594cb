// Where in a source image the output comes from: torchvision's RandomResizedCrop for training and
// the ImageNet centre crop for evaluation, as rectangles in source pixel coordinates. Pure maths,
// deterministic for a given random source.
#pragma once

#include <cstdint>

#include "formats/seed.h"

namespace sluice {

// Uniform in [lo, hi).
double Uniform(AugmentRng& rng, double lo, double hi);
// Uniform integer in [0, n] (n >= 0), by Lemire's multiply-shift: no division, and its bias of
// at most n / 2^64 is far below anything a crop could show.
int UniformInt(AugmentRng& rng, int n);
// True with probability p: always at p >= 1, never at p <= 0 (neither draws).
bool Bernoulli(AugmentRng& rng, double p);
// Python's round(): halves go to the even neighbour (the default floating-point rounding mode),
// so crops match torchvision's to the pixel.
int RoundHalfEven(double v);

struct CropWindow {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  bool operator==(const CropWindow&) const = default;
};

struct RandomResizedCropParams {
  double min_area = 0.08;  // fraction of the source area
  double max_area = 1.0;
  double min_aspect = 3.0 / 4.0;  // width / height
  double max_aspect = 4.0 / 3.0;
  int attempts = 10;
};

// torchvision.transforms.RandomResizedCrop.get_params: up to `attempts` tries of a random area
// fraction and log-uniform aspect; if none fits, the centre crop of the largest window whose
// aspect is clamped to [min_aspect, max_aspect]. REQUIRES: width, height >= 1.
CropWindow RandomResizedCrop(int width, int height, const RandomResizedCropParams& params,
                             AugmentRng& rng);

// Evaluation: the window that, once the shorter side is resized to out * 256 / 224, is the centre
// out_width x out_height crop — computed directly in source coordinates.
CropWindow CenterCrop(int width, int height, int out_width, int out_height);

}  // namespace sluice

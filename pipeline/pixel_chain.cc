#include "pipeline/pixel_chain.h"

#include <array>
#include <cstring>
#include <utility>

#include "formats/crop_window.h"
#include "pipeline/auto_augment.h"

namespace sluice {
namespace {

void Note(std::vector<PixelOpDraw>* draws, std::string name, std::vector<double> params) {
  if (draws != nullptr) draws->push_back(PixelOpDraw{std::move(name), std::move(params)});
}

// torchvision ColorJitter's draws: a random order of the four (randperm), then each factor drawn
// from its range. Returns how many steps it put in steps, in the order they apply (absent ones
// left out).
int DrawColorJitter(const PixelOp& op, AugmentRng& rng, JitterStep (&steps)[4]) {
  std::array<int, 4> order = {0, 1, 2, 3};
  if (op.random_order) {
    for (int i = 3; i > 0; --i) std::swap(order[i], order[UniformInt(rng, i)]);
  }
  const double b = op.has_brightness ? Uniform(rng, op.brightness[0], op.brightness[1]) : 1;
  const double c = op.has_contrast ? Uniform(rng, op.contrast[0], op.contrast[1]) : 1;
  const double s = op.has_saturation ? Uniform(rng, op.saturation[0], op.saturation[1]) : 1;
  const double h = op.has_hue ? Uniform(rng, op.hue[0], op.hue[1]) : 0;
  int n = 0;
  for (int fn : order) {
    switch (fn) {
      case 0:
        if (op.has_brightness) steps[n++] = JitterStep{JitterStep::Kind::kBrightness, b};
        break;
      case 1:
        if (op.has_contrast) steps[n++] = JitterStep{JitterStep::Kind::kContrast, c};
        break;
      case 2:
        if (op.has_saturation) steps[n++] = JitterStep{JitterStep::Kind::kSaturation, s};
        break;
      default:
        if (op.has_hue) steps[n++] = JitterStep{JitterStep::Kind::kHue, h};
        break;
    }
  }
  return n;
}

void ColorJitter(const PixelOp& op, MutableImageView img, AugmentRng& rng,
                 std::vector<PixelOpDraw>* draws) {
  JitterStep steps[4];
  const int n = DrawColorJitter(op, rng, steps);
  for (int i = 0; i < n; ++i) {
    const double f = steps[i].factor;
    switch (steps[i].kind) {
      case JitterStep::Kind::kBrightness:
        AdjustBrightness(img, f), Note(draws, "brightness", {f});
        break;
      case JitterStep::Kind::kContrast:
        AdjustContrast(img, f), Note(draws, "contrast", {f});
        break;
      case JitterStep::Kind::kSaturation:
        AdjustSaturation(img, f), Note(draws, "saturation", {f});
        break;
      case JitterStep::Kind::kHue:
        AdjustHue(img, f), Note(draws, "hue", {f});
        break;
    }
  }
}

}  // namespace

void ApplyPixelOps(const std::vector<PixelOp>& ops, MutableImageView img, AugmentRng& rng,
                     std::vector<float>* blur_scratch, std::vector<uint8_t>* scratch,
                     std::vector<PixelOpDraw>* draws) {
  for (const PixelOp& op : ops) {
    switch (op.kind) {
      case PixelOp::Kind::kColorJitter:
        if (Bernoulli(rng, op.p)) ColorJitter(op, img, rng, draws);
        break;
      case PixelOp::Kind::kGrayscale:
        if (Bernoulli(rng, op.p)) ToGrayscale(img), Note(draws, "grayscale", {});
        break;
      case PixelOp::Kind::kGaussianBlur:
        if (Bernoulli(rng, op.p)) {
          const double sigma = Uniform(rng, op.sigma[0], op.sigma[1]);
          GaussianBlur(img, op.kernel_size, sigma, blur_scratch);
          Note(draws, "gaussian_blur", {static_cast<double>(op.kernel_size), sigma});
        }
        break;
      case PixelOp::Kind::kSolarize:
        if (Bernoulli(rng, op.p)) Solarize(img, op.threshold), Note(draws, "solarize", {op.threshold});
        break;
      case PixelOp::Kind::kPosterize:
        if (Bernoulli(rng, op.p)) {
          Posterize(img, op.bits);
          Note(draws, "posterize", {static_cast<double>(op.bits)});
        }
        break;
      case PixelOp::Kind::kRotate:
        if (Bernoulli(rng, op.p)) {
          const double angle = Uniform(rng, op.degrees[0], op.degrees[1]);
          // F.rotate warps from a copy: the source must not be the image being written.
          const size_t row = static_cast<size_t>(img.width) * 3;
          scratch->resize(row * img.height);
          for (int y = 0; y < img.height; ++y) {
            std::memcpy(scratch->data() + y * row, img.row(y), row);
          }
          AffineNearest(ImageView{scratch->data(), img.width, img.height, row}, img, angle, 0, 0, 0,
                        0, /*center_at_origin=*/false);
          Note(draws, "rotate", {angle});
        }
        break;
      case PixelOp::Kind::kTrivialAugmentWide:
      case PixelOp::Kind::kRandAugment: {
        const bool trivial = op.kind == PixelOp::Kind::kTrivialAugmentWide;
        const std::vector<AutoAugmentOp> drawn = SampleAutoAugment(
            trivial ? AutoAugmentPolicy::kTrivialAugmentWide : AutoAugmentPolicy::kRandAugment,
            trivial ? 1 : op.num_ops, op.magnitude, op.num_magnitude_bins, img.width, img.height,
            rng);
        for (const AutoAugmentOp& a : drawn) {
          ApplyAutoAugmentOp(a, img, scratch);
          Note(draws, std::string(AutoAugmentOpName(a.kind)), {a.magnitude});
        }
        break;
      }
    }
  }
}

void ApplyPixelOpsAndWrite(const std::vector<PixelOp>& ops, MutableImageView img, AugmentRng& rng,
                             std::vector<float>* blur_scratch, std::vector<uint8_t>* scratch,
                             const OutputSpec& output, void* dst) {
  if (ops.size() == 1 && ops[0].kind == PixelOp::Kind::kColorJitter) {
    JitterStep steps[4];
    const int n = Bernoulli(rng, ops[0].p) ? DrawColorJitter(ops[0], rng, steps) : 0;
    JitterAndWrite(img, steps, n, output, dst);
    return;
  }
  ApplyPixelOps(ops, img, rng, blur_scratch, scratch);
  WriteOutput(img.view(), output, dst);
}

}  // namespace sluice

#include "pipeline/auto_augment.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace sluice {
namespace {

constexpr std::array<std::string_view, kNumAutoAugmentOps> kNames = {
    "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize",
};

// Element i of torch.linspace(start, end, steps) in float32, bit for bit as torch 1.13's CPU
// kernel makes it on AVX2 (RangeFactoriesKernel.cpp, built with FMA contraction): an element alone
// is fma(step, i, start) in the first half and fma(-step, steps - 1 - i, end) in the second, so
// both ends are exact; while 16 or more are left from the front, they come as two 8-lane vectors
// whose lane k is the vector's first element plus the rounded product k * step. Solarize's
// thresholds and the translations' truncation depend on those last bits.
float LinspaceAt(double start, double end, int steps, int i) {
  const auto s = static_cast<float>(start);
  const auto e = static_cast<float>(end);
  const float step = (e - s) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  auto alone = [&](int j) {
    return j < halfway ? std::fma(step, static_cast<float>(j), s)
                       : std::fma(-step, static_cast<float>(steps - j - 1), e);
  };
  constexpr int kLanes = 8;
  const int vectorised = steps / (2 * kLanes) * (2 * kLanes);
  if (i >= vectorised) return alone(i);
  const int lane = i % kLanes;
  const float base = alone(i - lane);
  if (lane == 0) return base;
  const float lane_step = static_cast<float>(lane) * step;
  return base + lane_step;
}

// Element i of 8 - (torch.arange(num_bins) / ((num_bins - 1) / divisor)).round().int(): the
// division in float32, rounded half to even.
float PosterizeBitsAt(int num_bins, double divisor, int i) {
  const auto denom = static_cast<float>((num_bins - 1) / divisor);
  return static_cast<float>(8 - static_cast<int>(std::nearbyint(static_cast<float>(i) / denom)));
}

// Bin `bin` of the op's magnitudes (0 for the ops without).
float MagnitudeAt(AutoAugmentPolicy policy, AutoAugmentOpKind kind, int num_bins, int width,
                  int height, int bin) {
  const bool wide = policy == AutoAugmentPolicy::kTrivialAugmentWide;
  switch (kind) {
    case AutoAugmentOpKind::kShearX:
    case AutoAugmentOpKind::kShearY:
      return LinspaceAt(0.0, wide ? 0.99 : 0.3, num_bins, bin);
    case AutoAugmentOpKind::kTranslateX:
      return LinspaceAt(0.0, wide ? 32.0 : 150.0 / 331.0 * width, num_bins, bin);
    case AutoAugmentOpKind::kTranslateY:
      return LinspaceAt(0.0, wide ? 32.0 : 150.0 / 331.0 * height, num_bins, bin);
    case AutoAugmentOpKind::kRotate:
      return LinspaceAt(0.0, wide ? 135.0 : 30.0, num_bins, bin);
    case AutoAugmentOpKind::kBrightness:
    case AutoAugmentOpKind::kColor:
    case AutoAugmentOpKind::kContrast:
    case AutoAugmentOpKind::kSharpness:
      return LinspaceAt(0.0, wide ? 0.99 : 0.9, num_bins, bin);
    case AutoAugmentOpKind::kPosterize:
      return PosterizeBitsAt(num_bins, wide ? 6.0 : 4.0, bin);
    case AutoAugmentOpKind::kSolarize:
      return LinspaceAt(255.0, 0.0, num_bins, bin);
    case AutoAugmentOpKind::kIdentity:
    case AutoAugmentOpKind::kAutoContrast:
    case AutoAugmentOpKind::kEqualize:
      return 0;
  }
  return 0;
}

// Identity, AutoContrast and Equalize have no magnitude (torch.tensor(0.0), zero-dimensional).
bool HasBins(AutoAugmentOpKind kind) {
  return kind != AutoAugmentOpKind::kIdentity && kind != AutoAugmentOpKind::kAutoContrast &&
         kind != AutoAugmentOpKind::kEqualize;
}

int UniformInt(AugmentRng& rng, int n) {
  return std::min(n - 1, static_cast<int>(rng.NextDouble() * n));
}

// Copies img into scratch, tightly packed, and returns a view of the copy.
ImageView CopyToScratch(MutableImageView img, std::vector<uint8_t>* scratch) {
  const size_t row_bytes = static_cast<size_t>(img.width) * 3;
  scratch->resize(row_bytes * img.height);
  for (int y = 0; y < img.height; ++y) {
    std::memcpy(scratch->data() + y * row_bytes, img.row(y), row_bytes);
  }
  return ImageView{scratch->data(), img.width, img.height, row_bytes};
}

// math.degrees(math.atan(tangent)), as Python computes it (x * (180 / pi)).
double ShearDegrees(double tangent) { return std::atan(tangent) * (180.0 / M_PI); }

}  // namespace

std::string_view AutoAugmentOpName(AutoAugmentOpKind kind) {
  return kNames[static_cast<size_t>(kind)];
}

std::optional<AutoAugmentOpKind> AutoAugmentOpFromName(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<AutoAugmentOpKind>(i);
  }
  return std::nullopt;
}

bool AutoAugmentOpIsSigned(AutoAugmentOpKind kind) {
  switch (kind) {
    case AutoAugmentOpKind::kShearX:
    case AutoAugmentOpKind::kShearY:
    case AutoAugmentOpKind::kTranslateX:
    case AutoAugmentOpKind::kTranslateY:
    case AutoAugmentOpKind::kRotate:
    case AutoAugmentOpKind::kBrightness:
    case AutoAugmentOpKind::kColor:
    case AutoAugmentOpKind::kContrast:
    case AutoAugmentOpKind::kSharpness:
      return true;
    default:
      return false;
  }
}

std::vector<float> AutoAugmentMagnitudes(AutoAugmentPolicy policy, AutoAugmentOpKind kind,
                                         int num_bins, int width, int height) {
  if (!HasBins(kind)) return {};
  std::vector<float> bins(num_bins);
  for (int i = 0; i < num_bins; ++i) {
    bins[i] = MagnitudeAt(policy, kind, num_bins, width, height, i);
  }
  return bins;
}

std::vector<AutoAugmentOp> SampleAutoAugment(AutoAugmentPolicy policy, int num_ops, int magnitude,
                                             int num_bins, int width, int height, AugmentRng& rng) {
  const bool wide = policy == AutoAugmentPolicy::kTrivialAugmentWide;
  const int count = wide ? 1 : num_ops;
  std::vector<AutoAugmentOp> ops;
  ops.reserve(count);
  for (int i = 0; i < count; ++i) {
    AutoAugmentOp op;
    op.kind = static_cast<AutoAugmentOpKind>(UniformInt(rng, kNumAutoAugmentOps));
    if (HasBins(op.kind)) {
      const int bin = wide ? UniformInt(rng, num_bins) : magnitude;
      op.magnitude = MagnitudeAt(policy, op.kind, num_bins, width, height, bin);
    }
    if (AutoAugmentOpIsSigned(op.kind) && (rng.NextU64() & 1) != 0) op.magnitude = -op.magnitude;
    ops.push_back(op);
  }
  return ops;
}

void ApplyAutoAugmentOp(const AutoAugmentOp& op, MutableImageView img,
                        std::vector<uint8_t>* scratch) {
  const double m = op.magnitude;
  switch (op.kind) {
    case AutoAugmentOpKind::kIdentity:
      return;
    case AutoAugmentOpKind::kShearX:
      AffineNearest(CopyToScratch(img, scratch), img, 0, 0, 0, ShearDegrees(m), 0, true);
      return;
    case AutoAugmentOpKind::kShearY:
      AffineNearest(CopyToScratch(img, scratch), img, 0, 0, 0, 0, ShearDegrees(m), true);
      return;
    case AutoAugmentOpKind::kTranslateX:
      AffineNearest(CopyToScratch(img, scratch), img, 0, std::trunc(m), 0, 0, 0, false);
      return;
    case AutoAugmentOpKind::kTranslateY:
      AffineNearest(CopyToScratch(img, scratch), img, 0, 0, std::trunc(m), 0, 0, false);
      return;
    case AutoAugmentOpKind::kRotate:
      AffineNearest(CopyToScratch(img, scratch), img, m, 0, 0, 0, 0, false);
      return;
    case AutoAugmentOpKind::kBrightness:
      AdjustBrightness(img, 1.0 + m);
      return;
    case AutoAugmentOpKind::kColor:
      AdjustSaturation(img, 1.0 + m);
      return;
    case AutoAugmentOpKind::kContrast:
      AdjustContrast(img, 1.0 + m);
      return;
    case AutoAugmentOpKind::kSharpness:
      AdjustSharpness(img, 1.0 + m, scratch);
      return;
    case AutoAugmentOpKind::kPosterize:
      Posterize(img, static_cast<int>(m));
      return;
    case AutoAugmentOpKind::kSolarize:
      Solarize(img, m);
      return;
    case AutoAugmentOpKind::kAutoContrast:
      AutoContrast(img);
      return;
    case AutoAugmentOpKind::kEqualize:
      Equalize(img);
      return;
  }
}

}  // namespace sluice

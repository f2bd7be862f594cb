#include "pipeline/batch_mix.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/crop_window.h"
#include "formats/pixel_ops.h"

namespace sluice {
namespace {

// Salt of the mixing draws, apart from the per-image ones.
constexpr uint64_t kMixSalt = 0x6d69787570ull;  // "mixup"

double Normal(AugmentRng& rng) {
  // Box-Muller; 1 - u keeps the log's argument in (0, 1].
  const double u = 1.0 - rng.NextDouble();
  const double v = rng.NextDouble();
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
}

double Gamma(double alpha, AugmentRng& rng) {
  if (alpha < 1) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a).
    const double u = 1.0 - rng.NextDouble();
    return Gamma(alpha + 1, rng) * std::pow(u, 1.0 / alpha);
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = Normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - rng.NextDouble();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

float Load(const uint8_t* p, DType t) {
  switch (t) {
    case DType::kUint8:
      return *p;
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    }
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
  return 0;
}

void Store(float v, uint8_t* p, DType t) {
  switch (t) {
    case DType::kUint8:
      *p = static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.0f, 255.0f));
      break;
    case DType::kFloat16: {
      const uint16_t h = FloatToHalf(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t h = FloatToBFloat16(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kFloat32:
      std::memcpy(p, &v, 4);
      break;
  }
}

// dst = lambda * dst + (1 - lambda) * other, element by element.
void Blend(uint8_t* dst, const uint8_t* other, size_t values, DType t, float lambda) {
  const size_t step = DTypeSize(t);
  const float rest = 1 - lambda;
  if (t == DType::kFloat32) {
    float* d = reinterpret_cast<float*>(dst);
    const float* o = reinterpret_cast<const float*>(other);
    for (size_t i = 0; i < values; ++i) d[i] = lambda * d[i] + rest * o[i];
    return;
  }
  if (t == DType::kUint8) {
    // Rounded half up: the blend of two values in [0, 255] stays in it.
    for (size_t i = 0; i < values; ++i) {
      dst[i] = static_cast<uint8_t>(static_cast<int>(lambda * dst[i] + rest * other[i] + 0.5f));
    }
    return;
  }
  if (t == DType::kBFloat16) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    const uint16_t* o = reinterpret_cast<const uint16_t*>(other);
    for (size_t i = 0; i < values; ++i) {
      d[i] = FloatToBFloat16(lambda * BFloat16ToFloat(d[i]) + rest * BFloat16ToFloat(o[i]));
    }
    return;
  }
  for (size_t i = 0; i < values; ++i) {
    Store(lambda * Load(dst + i * step, t) + (1 - lambda) * Load(other + i * step, t),
          dst + i * step, t);
  }
}

// Copies the box [x1, x2) x [y1, y2) of other into dst (one image each, in buffer's layout).
void Paste(uint8_t* dst, const uint8_t* other, const BatchBuffer& b, int x1, int y1, int x2,
           int y2) {
  const size_t e = DTypeSize(b.dtype);
  if (b.layout == Layout::kNhwc) {
    const size_t row = static_cast<size_t>(b.width) * 3 * e;
    const size_t off = static_cast<size_t>(x1) * 3 * e, len = static_cast<size_t>(x2 - x1) * 3 * e;
    for (int y = y1; y < y2; ++y) std::memcpy(dst + y * row + off, other + y * row + off, len);
    return;
  }
  const size_t row = static_cast<size_t>(b.width) * e;
  const size_t plane = row * b.height;
  const size_t off = static_cast<size_t>(x1) * e, len = static_cast<size_t>(x2 - x1) * e;
  for (int c = 0; c < 3; ++c) {
    for (int y = y1; y < y2; ++y) {
      const size_t at = c * plane + y * row + off;
      std::memcpy(dst + at, other + at, len);
    }
  }
}

}  // namespace

double SampleBeta(double alpha, AugmentRng& rng) {
  const double x = Gamma(alpha, rng);
  const double y = Gamma(alpha, rng);
  if (x + y > 0) return x / (x + y);
  // Both draws underflowed (alpha far below 1): Beta(alpha, alpha) is then 0 or 1 with equal odds.
  return static_cast<double>(rng.NextU64() & 1);
}

void BatchMixer::Mix(BatchBuffer* b, int size, int64_t epoch, int64_t index) {
  AugmentRng rng(MixSeed(MixSeed(seed_, kMixSalt), static_cast<uint64_t>(epoch)),
                 static_cast<uint64_t>(index));
  bool cutmix = spec_.cutmix_alpha > 0;
  if (spec_.mixup_alpha > 0 && spec_.cutmix_alpha > 0) cutmix = (rng.NextU64() & 1) != 0;
  const double lambda = SampleBeta(cutmix ? spec_.cutmix_alpha : spec_.mixup_alpha, rng);
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  double weight = lambda;
  if (cutmix) {
    // torchvision v2 CutMix: a box centred at a uniform pixel, sides sqrt(1 - lambda) of the
    // image's, clipped to it; the weight is what the box leaves.
    const int cx = UniformInt(rng, b->width - 1);
    const int cy = UniformInt(rng, b->height - 1);
    const double r = 0.5 * std::sqrt(1.0 - lambda);
    const int half_w = static_cast<int>(r * b->width);
    const int half_h = static_cast<int>(r * b->height);
    x1 = std::max(cx - half_w, 0);
    y1 = std::max(cy - half_h, 0);
    x2 = std::min(cx + half_w, b->width);
    y2 = std::min(cy + half_h, b->height);
    weight = 1.0 -
             static_cast<double>(x2 - x1) * (y2 - y1) / (static_cast<double>(b->width) * b->height);
  }
  for (int i = 0; i < size; ++i) {
    b->mixed_labels[i] = b->labels[(i + size - 1) % size];
    b->label_weights[i] = static_cast<float>(weight);
  }
  // Equal-shares padding samples (repeats, masked invalid) are mixed like the others: they are
  // real images, and the mask keeps them out of losses either way.
  if (size < 2) {
    // A lone sample mixes with itself: the image stays, and so does its label.
    if (size == 1) b->label_weights[0] = 1.0f;
    return;
  }
  last_.assign(b->image(size - 1), b->image(size - 1) + b->image_bytes);
  const size_t values = static_cast<size_t>(b->height) * b->width * 3;
  for (int i = size - 1; i >= 0; --i) {
    const uint8_t* other = i > 0 ? b->image(i - 1) : last_.data();
    if (cutmix) {
      Paste(b->image(i), other, *b, x1, y1, x2, y2);
    } else {
      Blend(b->image(i), other, values, b->dtype, static_cast<float>(lambda));
    }
  }
}

}  // namespace sluice

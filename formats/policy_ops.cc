// The policies' own kernels (pixel_ops.h: AutoContrast, Equalize, AdjustSharpness, AffineNearest),
// each torchvision 0.14's tensor kernel on uint8 (transforms/functional_tensor.py) step by step:
// the same float32 operations in the same order, so the results match it exactly or, where torch's
// own summation order is not ours (the 3x3 blur), within one level. This file is compiled with
// -ffp-contract=off (formats/CMakeLists.txt): torch rounds each product and sum, and a fused
// multiply-add would move the affine grid's .5 ties; and with the vectorizer's dynamic cost model
// and no trapping math, as pixel_ops.cc, so the sharpness row loop runs in SIMD (same values).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/pixel_ops.h"

namespace sluice {
namespace {

// Rounds half to even, as torch.round and grid_sample's _mm256_round_ps do, without a libm call
// per pixel: adding and subtracting 1.5 * 2^23 leaves an integer, rounded in the default
// nearest-even mode. REQUIRES: |v| < 2^22.
float RoundHalfEven(float v) {
  constexpr float kMagic = 0x1.8p23f;
  return (v + kMagic) - kMagic;
}

// float -> uint8 as torch's .to(torch.uint8) after clamp(0, 255): truncation.
uint8_t TruncateToU8(float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f)); }

// torchvision's _blend(img1, img2, ratio) on uint8: ratio and 1 - ratio as float32 scalars, each
// product rounded, the sum clamped and truncated.
uint8_t Blend(uint8_t a, uint8_t b, float ratio, float one_minus_ratio) {
  float pa = ratio * static_cast<float>(a);
  float pb = one_minus_ratio * static_cast<float>(b);
  return TruncateToU8(pa + pb);
}

}  // namespace

void AutoContrast(MutableImageView img) {
  if (img.width <= 0 || img.height <= 0) return;
  std::array<uint8_t, 3> lo = {255, 255, 255};
  std::array<uint8_t, 3> hi = {0, 0, 0};
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* row = img.row(y);
    for (int x = 0; x < img.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        lo[c] = std::min(lo[c], row[3 * x + c]);
        hi[c] = std::max(hi[c], row[3 * x + c]);
      }
    }
  }
  // bound / (max - min) is Tensor.__rtruediv__: reciprocal, then times 255. A constant channel
  // (infinite scale) keeps min 0 and scale 1: unchanged.
  std::array<uint8_t, 256 * 3> lut;
  for (int c = 0; c < 3; ++c) {
    float minimum = lo[c];
    float scale = (1.0f / (static_cast<float>(hi[c]) - minimum)) * 255.0f;
    if (!std::isfinite(scale)) {
      minimum = 0;
      scale = 1;
    }
    for (int v = 0; v < 256; ++v) {
      lut[c * 256 + v] = TruncateToU8((static_cast<float>(v) - minimum) * scale);
    }
  }
  for (int y = 0; y < img.height; ++y) {
    uint8_t* row = img.row(y);
    for (int x = 0; x < img.width; ++x) {
      for (int c = 0; c < 3; ++c) row[3 * x + c] = lut[c * 256 + row[3 * x + c]];
    }
  }
}

void Equalize(MutableImageView img) {
  if (img.width <= 0 || img.height <= 0) return;
  std::array<std::array<int64_t, 256>, 3> hist{};
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* row = img.row(y);
    for (int x = 0; x < img.width; ++x) {
      for (int c = 0; c < 3; ++c) ++hist[c][row[3 * x + c]];
    }
  }
  // _scale_channel: step = (count of every value but the highest present one) // 255; a channel
  // with step 0 (one value, or almost all pixels at the top) is unchanged. Otherwise
  // lut[v] = (cumsum[v - 1] + step // 2) // step, lut[0] = 0, clamped to 255.
  std::array<std::array<uint8_t, 256>, 3> lut;
  bool changes = false;
  for (int c = 0; c < 3; ++c) {
    int64_t total = 0;
    int64_t last_nonzero = 0;
    for (int64_t h : hist[c]) {
      total += h;
      if (h != 0) last_nonzero = h;
    }
    const int64_t step = (total - last_nonzero) / 255;
    if (step == 0) {
      for (int v = 0; v < 256; ++v) lut[c][v] = static_cast<uint8_t>(v);
      continue;
    }
    changes = true;
    int64_t cumsum = 0;
    lut[c][0] = 0;
    for (int v = 1; v < 256; ++v) {
      cumsum += hist[c][v - 1];
      lut[c][v] = static_cast<uint8_t>(std::min<int64_t>(255, (cumsum + step / 2) / step));
    }
  }
  if (!changes) return;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* row = img.row(y);
    for (int x = 0; x < img.width; ++x) {
      for (int c = 0; c < 3; ++c) row[3 * x + c] = lut[c][row[3 * x + c]];
    }
  }
}

void AdjustSharpness(MutableImageView img, double factor, std::vector<uint8_t>* scratch) {
  // torchvision returns images of width or height <= 2 unchanged: they have no interior.
  if (img.width <= 2 || img.height <= 2) return;
  const size_t row_bytes = static_cast<size_t>(img.width) * 3;
  scratch->resize(row_bytes * img.height);
  for (int y = 0; y < img.height; ++y) {
    std::memcpy(scratch->data() + y * row_bytes, img.row(y), row_bytes);
  }
  // _blurred_degenerate_image: the kernel [[1,1,1],[1,5,1],[1,1,1]] / 13 in float32, its output
  // rounded half to even (torch.round) into uint8 on the interior; the border keeps the image.
  const float w_side = 1.0f / 13.0f;
  const float w_mid = 5.0f / 13.0f;
  const float ratio = static_cast<float>(factor);
  const float one_minus_ratio = static_cast<float>(1.0 - factor);
  const int interior_end = static_cast<int>(row_bytes) - 3;
  for (int y = 1; y + 1 < img.height; ++y) {
    const uint8_t* __restrict above = scratch->data() + (y - 1) * row_bytes;
    const uint8_t* __restrict here = above + row_bytes;
    const uint8_t* __restrict below = here + row_bytes;
    uint8_t* __restrict out = img.row(y);
    // The interior's bytes, every channel in one run (a neighbour is 3 bytes away).
    for (int i = 3; i < interior_end; ++i) {
      float sum = w_side * above[i - 3];
      sum += w_side * above[i];
      sum += w_side * above[i + 3];
      sum += w_side * here[i - 3];
      sum += w_mid * here[i];
      sum += w_side * here[i + 3];
      sum += w_side * below[i - 3];
      sum += w_side * below[i];
      sum += w_side * below[i + 3];
      // sum lies in [0, 255]: a weighted mean of uint8 values.
      const auto blurred = static_cast<uint8_t>(std::clamp(RoundHalfEven(sum), 0.0f, 255.0f));
      out[i] = Blend(here[i], blurred, ratio, one_minus_ratio);
    }
  }
  // The border: blended with itself, which the truncation may still move by one for factors
  // whose float32 products do not sum back to the value exactly.
  auto blend_self = [&](uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = Blend(p[c], p[c], ratio, one_minus_ratio);
  };
  for (int x = 0; x < img.width; ++x) {
    blend_self(img.row(0) + 3 * x);
    blend_self(img.row(img.height - 1) + 3 * x);
  }
  for (int y = 1; y + 1 < img.height; ++y) {
    blend_self(img.row(y));
    blend_self(img.row(y) + row_bytes - 3);
  }
}

void AffineNearest(const ImageView& src, MutableImageView dst, double angle_deg, double translate_x,
                   double translate_y, double shear_x_deg, double shear_y_deg,
                   bool center_at_origin) {
  const int w = src.width;
  const int h = src.height;
  // torchvision's _get_inverse_affine_matrix in double, as Python computes it (math.radians is
  // x * (pi / 180)). The centre is relative to the image centre: [0, 0] there is [-w/2, -h/2]
  // here. F.rotate passes -angle (its angle is counter-clockwise, F.affine's clockwise).
  constexpr double kDegToRad = M_PI / 180.0;
  const double rot = -angle_deg * kDegToRad;
  const double sx = shear_x_deg * kDegToRad;
  const double sy = shear_y_deg * kDegToRad;
  const double cx = center_at_origin ? -(w * 0.5) : 0.0;
  const double cy = center_at_origin ? -(h * 0.5) : 0.0;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - translate_x) + m[1] * (-cy - translate_y);
  m[5] += m[3] * (-cx - translate_x) + m[4] * (-cy - translate_y);
  m[2] += cx;
  m[5] += cy;

  // _gen_affine_grid in float32: theta transposed and divided by [w/2, h/2]; each output pixel's
  // centre (x, y, 1) in centred coordinates times it, products rounded before the sums (torch's
  // bmm here matches that order bit for bit). Then grid_sample(nearest, zeros,
  // align_corners=False): (g + 1) * size/2 - 0.5, rounded half to even; outside is 0.
  const float half_w = static_cast<float>(0.5 * w);
  const float half_h = static_cast<float>(0.5 * h);
  const float r00 = static_cast<float>(m[0]) / half_w;
  const float r10 = static_cast<float>(m[1]) / half_w;
  const float r20 = static_cast<float>(m[2]) / half_w;
  const float r01 = static_cast<float>(m[3]) / half_h;
  const float r11 = static_cast<float>(m[4]) / half_h;
  const float r21 = static_cast<float>(m[5]) / half_h;
  const auto width_f = static_cast<float>(w);
  const auto height_f = static_cast<float>(h);
  const float scale_x = static_cast<float>(w) / 2;
  const float scale_y = static_cast<float>(h) / 2;
  for (int i = 0; i < h; ++i) {
    const auto yc = static_cast<float>(i - h * 0.5 + 0.5);
    const float y_r10 = yc * r10;
    const float y_r11 = yc * r11;
    uint8_t* out = dst.row(i);
    for (int j = 0; j < w; ++j) {
      const auto xc = static_cast<float>(j - w * 0.5 + 0.5);
      const float gx = (xc * r00 + y_r10) + r20;
      const float gy = (xc * r01 + y_r11) + r21;
      const float ix = (gx + 1.0f) * scale_x - 0.5f;
      const float iy = (gy + 1.0f) * scale_y - 0.5f;
      uint8_t* px = out + 3 * j;
      // At or below -1, at or above the size (or NaN) rounds outside: fill, and keeps
      // RoundHalfEven within its range.
      const bool near = ix > -1.0f && ix < width_f && iy > -1.0f && iy < height_f;
      const float rx = near ? RoundHalfEven(ix) : -1.0f;
      const float ry = near ? RoundHalfEven(iy) : -1.0f;
      if (rx >= 0 && rx < width_f && ry >= 0 && ry < height_f) {
        const uint8_t* s =
            src.data + static_cast<size_t>(ry) * src.stride + 3 * static_cast<size_t>(rx);
        px[0] = s[0];
        px[1] = s[1];
        px[2] = s[2];
      } else {
        px[0] = px[1] = px[2] = 0;
      }
    }
  }
}

}  // namespace sluice

// Per-pixel and whole-image ops on interleaved RGB uint8 images, with torchvision's semantics on a
// uint8 tensor (torchvision.transforms.v2.functional): each op reads and writes uint8, rounding
// (or truncating) as torchvision's kernel does, so a chain of them matches torchvision's chain
// within one level per op. In place unless noted. Pure functions; no threads (formats/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/dtype.h"
#include "formats/image_ops.h"

namespace sluice {

// A writable window on RGB pixels; stride is in bytes between rows.
struct MutableImageView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  size_t stride = 0;

  uint8_t* row(int y) const { return data + static_cast<size_t>(y) * stride; }
  ImageView view() const { return ImageView{data, width, height, stride}; }
};

// ---- Colour (color_jitter, grayscale, solarize, posterize, and the policies' colour ops) ----

// F.adjust_brightness: x * factor, clamped. factor >= 0.
void AdjustBrightness(MutableImageView img, double factor);
// F.adjust_contrast: blended with the mean of the image's grayscale (as uint8) by factor.
void AdjustContrast(MutableImageView img, double factor);
// F.adjust_saturation: blended with the pixel's grayscale by factor.
void AdjustSaturation(MutableImageView img, double factor);
// F.adjust_hue: the hue rotated by hue_factor turns (-0.5..0.5), through HSV in float.
void AdjustHue(MutableImageView img, double hue_factor);
// F.rgb_to_grayscale(num_output_channels=3): 0.2989 R + 0.587 G + 0.114 B in every channel.
void ToGrayscale(MutableImageView img);
// F.solarize: values >= threshold become 255 - value.
void Solarize(MutableImageView img, double threshold);
// F.posterize: keeps the top `bits` bits (1..8).
void Posterize(MutableImageView img, int bits);
// F.gaussian_blur(kernel_size, [sigma, sigma]): separable, reflect-padded. kernel_size odd >= 1.
// scratch: the caller's, reused across calls.
void GaussianBlur(MutableImageView img, int kernel_size, double sigma,
                  std::vector<float>* scratch);

// ---- The policies' (TrivialAugmentWide, RandAugment) other ops ----

// F.autocontrast: each channel stretched from its [min, max] to [0, 255].
void AutoContrast(MutableImageView img);
// F.equalize: each channel's histogram equalized (torchvision's, PIL-compatible, algorithm).
void Equalize(MutableImageView img);
// F.adjust_sharpness: blended with the 3x3 smoothed image (border pixels kept) by factor.
void AdjustSharpness(MutableImageView img, double factor, std::vector<uint8_t>* scratch);

// F.affine with NEAREST interpolation and fill 0, into dst (same size as src, not overlapping
// it): angle in degrees (counter-clockwise, as torchvision), translate in pixels, shear in
// degrees (x, y), scale 1. center_at_origin: torchvision's center=[0, 0] (the policies' shears);
// else the image centre. F.rotate(angle) is Affine with angle and nothing else.
void AffineNearest(const ImageView& src, MutableImageView dst, double angle_deg, double translate_x,
                   double translate_y, double shear_x_deg, double shear_y_deg,
                   bool center_at_origin);

// ---- Output: normalize, dtype and layout, written straight into a batch slot ----

// How a uint8 RGB image becomes a batch slot: value = x * scale[c] + bias[c] for a float dtype
// (normalize folds into scale and bias: scale = 1 / (255 std), bias = -mean / std), x itself for
// uint8 (scale and bias unused); dtype and layout as DType and Layout say.
struct OutputSpec {
  DType dtype = DType::kUint8;
  Layout layout = Layout::kNhwc;
  float scale[3] = {1.0f / 255, 1.0f / 255, 1.0f / 255};
  float bias[3] = {0, 0, 0};
};

// Writes img (width x height RGB) into dst as spec says: NHWC rows of width * 3 values, or NCHW
// planes of height * width values, tightly packed, DTypeSize(spec.dtype) bytes each (bfloat16
// rounded to nearest even, float16 as F16C's round to nearest even). One pass.
void WriteOutput(const ImageView& img, const OutputSpec& spec, void* dst);

// ---- Colour jitter and output fused: one pass, straight into a batch slot ----

// One colour jitter op for JitterAndWrite: factor as the matching Adjust* function takes it.
struct JitterStep {
  enum class Kind { kBrightness, kContrast, kSaturation, kHue };
  Kind kind = Kind::kBrightness;
  double factor = 1;
};

// The most steps one JitterAndWrite takes (ColorJitter has four).
constexpr int kMaxJitterSteps = 8;

// The steps in order and then WriteOutput(img, spec, dst), in one pass of 16-pixel blocks held in
// registers: the same bytes as AdjustBrightness/Contrast/Saturation/Hue applied to img in that
// order and then WriteOutput, because each step truncates its values to uint8 as those ops do.
// A contrast step needs the mean gray of the image as it is when contrast runs: the steps before
// it run in a first pass that writes them back into img and sums the gray (a read-only pass when
// none come before it). img is scratch: what it holds afterwards is unspecified.
// REQUIRES: 0 <= n <= kMaxJitterSteps.
void JitterAndWrite(MutableImageView img, const JitterStep* steps, int n, const OutputSpec& spec,
                    void* dst);

// bfloat16 and float16 conversions the clients and tests share (round to nearest even).
// Inline, so that loops over many values (a batch's mixup) vectorize.
inline uint16_t FloatToBFloat16(float f) {
  // c10::BFloat16's round_to_nearest_even: NaN becomes the canonical quiet NaN.
  if (f != f) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
inline float BFloat16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

}  // namespace sluice

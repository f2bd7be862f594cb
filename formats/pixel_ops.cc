// The colour ops and the output writer of pixel_ops.h. Each reproduces torchvision's arithmetic on
// a uint8 tensor step by step in float32 (the same roundings, in the same order), so most outputs
// equal torchvision's exactly. This file is compiled with -ffp-contract=off
// (formats/CMakeLists.txt): a fused multiply-add would round differently from torch's separate
// multiply and add, and from the other kernel path. The AVX2 kernels do the portable ones' IEEE
// operations in the same order, so both give the same bytes (tests/formats/pixel_ops_test.cc
// compares them).
#include "formats/pixel_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/pixel_ops_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SLUICE_HAVE_X86_PIXEL_KERNELS 1
#else
#define SLUICE_HAVE_X86_PIXEL_KERNELS 0
#endif

namespace sluice {
namespace {

using pixel_internal::Kernels;

#define SLUICE_ALWAYS_INLINE __attribute__((always_inline)) inline

// Python floats become float32 scalars in torch's float32 ops: round the double, as torch does.
float F32(double v) { return static_cast<float>(v); }

// std::min and std::max on floats by value: the reference-returning ones keep GCC's if-conversion,
// and with it vectorization, out of a loop.
SLUICE_ALWAYS_INLINE float MinF(float a, float b) { return b < a ? b : a; }
SLUICE_ALWAYS_INLINE float MaxF(float a, float b) { return a < b ? b : a; }

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// torch's float -> uint8 cast of a value already clamped to [0, 255]: truncation. NaN (a NaN
// factor) becomes 0 rather than undefined behaviour.
uint8_t TruncU8(float v) { return v >= 0.0f ? static_cast<uint8_t>(static_cast<int>(v)) : 0; }

// Applies a 256-entry table to every channel value.
void ApplyLut(MutableImageView img, const uint8_t (&lut)[256]) {
  const size_t n = static_cast<size_t>(img.width) * 3;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = img.row(y);
    for (size_t i = 0; i < n; ++i) p[i] = lut[p[i]];
  }
}

// _blend(x, other, ratio) for uint8 x: (ratio * x + (1 - ratio) * other).clamp(0, 255) truncated,
// each product and the sum rounded to float32.
SLUICE_ALWAYS_INLINE uint8_t Blend(float ratio_x, float other_term) {
  return TruncU8(std::min(std::max(ratio_x + other_term, 0.0f), 255.0f));
}

// rgb_to_grayscale on uint8: (0.2989 r + 0.587 g + 0.114 b) in float32, left to right, truncated.
SLUICE_ALWAYS_INLINE uint8_t Gray(const uint8_t* px) {
  const float l = (F32(0.2989) * px[0] + F32(0.587) * px[1]) + F32(0.114) * px[2];
  return static_cast<uint8_t>(static_cast<int>(l));
}

constexpr int kPixelBlock = 16;

// F.adjust_saturation on kPixelBlock pixels: each channel blended with the pixel's uint8 gray.
// params: the ratio and 1 - ratio as float32.
SLUICE_ALWAYS_INLINE void SaturationBlock(float* __restrict r, float* __restrict g,
                                          float* __restrict b, const float* params) {
  const float ratio = params[0], other = params[1];
  for (int i = 0; i < kPixelBlock; ++i) {
    const float l = (F32(0.2989) * r[i] + F32(0.587) * g[i]) + F32(0.114) * b[i];
    const float gray = other * static_cast<float>(static_cast<int>(l));
    // MaxF(0, v) also maps a NaN (a NaN factor) to 0.
    r[i] = static_cast<float>(static_cast<int>(MinF(MaxF(0.0f, ratio * r[i] + gray), 255.0f)));
    g[i] = static_cast<float>(static_cast<int>(MinF(MaxF(0.0f, ratio * g[i] + gray), 255.0f)));
    b[i] = static_cast<float>(static_cast<int>(MinF(MaxF(0.0f, ratio * b[i] + gray), 255.0f)));
  }
}

// ---- AdjustHue: F.adjust_hue's float arithmetic ----

// _rgb2hsv, the hue shift (h + hue_factor) % 1, _hsv2rgb, and the float -> uint8 conversion of
// convert_image_dtype (x * 255.999, truncated; the one transforms.v2 uses, which keeps hue 0 the
// identity), on channels given as floats 0..255; results are written back as whole floats.
// params: the hue factor as float32. HueBlockAvx2 is the same arithmetic in AVX2.
void HueBlock(float* __restrict r, float* __restrict g, float* __restrict b, const float* params) {
  const float hue = params[0];
  const float to_u8 = F32(255.0 + 1.0 - 1e-3);
  for (int i = 0; i < kPixelBlock; ++i) {
    const float rf = r[i] / 255.0f, gf = g[i] / 255.0f, bf = b[i] / 255.0f;
    const float maxc = MaxF(MaxF(rf, gf), bf);
    const float minc = MinF(MinF(rf, gf), bf);
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float crd = eqc ? 1.0f : cr;
    const float rc = (maxc - rf) / crd, gc = (maxc - gf) / crd, bc = (maxc - bf) / crd;
    // hr + hg + hb: exactly one term is selected, the others are zeros. Every arm is computed
    // before the selects: a float op only in one arm keeps GCC from vectorizing (it may trap).
    const float hr = bc - gc, hg = (rc + 2.0f) - bc, hb = (gc + 4.0f) - rc;
    const bool max_r = maxc == rf, max_g = maxc == gf;
    float h = max_r ? hr : (max_g ? hg : hb);
    h = h / 6.0f + 1.0f;
    const float h_less1 = h - 1.0f;
    h = h >= 1.0f ? h_less1 : h;  // fmod(., 1) on [5/6, 2)
    h = h + hue;
    const float h_down = h - 1.0f, h_up = h + 1.0f;
    const bool over = h >= 1.0f, under = h < 0.0f;
    h = over ? h_down : (under ? h_up : h);  // remainder(., 1) on [-0.5, 1.5)

    const float h6 = h * 6.0f;
    const float fi = static_cast<float>(static_cast<int>(h6));  // floor: h6 >= 0
    const float f = h6 - fi;
    const float fi_less6 = fi - 6.0f;
    const float sector = fi >= 6.0f ? fi_less6 : fi;
    const float v = maxc;
    const float p = MinF(MaxF(v * (1.0f - s), 0.0f), 1.0f);
    const float q = MinF(MaxF(v * (1.0f - s * f), 0.0f), 1.0f);
    const float t = MinF(MaxF(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    // Sectors 0..5: r = (v, q, p, p, t, v), g = (t, v, v, q, p, p), b = (p, p, t, v, v, q).
    const bool s0 = sector == 0.0f, s1 = sector == 1.0f, s2 = sector == 2.0f;
    const bool s3 = sector == 3.0f, s4 = sector == 4.0f, s5 = sector == 5.0f;
    const float ro = (s0 | s5) ? v : s1 ? q : s4 ? t : p;
    const float go = s0 ? t : (s1 | s2) ? v : s3 ? q : p;
    const float bo = (s0 | s1) ? p : s2 ? t : s5 ? q : v;
    r[i] = static_cast<float>(static_cast<int>(ro * to_u8));
    g[i] = static_cast<float>(static_cast<int>(go * to_u8));
    b[i] = static_cast<float>(static_cast<int>(bo * to_u8));
  }
}

// An op on kPixelBlock pixels: their channels as float arrays (r, g, b), and its parameters.
using BlockOp = void (*)(float*, float*, float*, const float*);

// kOp on the n <= kPixelBlock pixels at px.
template <BlockOp kOp>
SLUICE_ALWAYS_INLINE void OneBlock(uint8_t* px, int n, const float* params) {
  alignas(32) float r[kPixelBlock], g[kPixelBlock], b[kPixelBlock];
  for (int i = 0; i < kPixelBlock; ++i) {
    const int k = std::min(i, n - 1) * 3;  // a short block repeats its last pixel
    r[i] = px[k];
    g[i] = px[k + 1];
    b[i] = px[k + 2];
  }
  kOp(r, g, b, params);
  for (int i = 0; i < n; ++i) {
    px[i * 3] = static_cast<uint8_t>(r[i]);
    px[i * 3 + 1] = static_cast<uint8_t>(g[i]);
    px[i * 3 + 2] = static_cast<uint8_t>(b[i]);
  }
}

// Runs kOp on the image kPixelBlock pixels at a time, each channel deinterleaved into a float array
// of values 0..255; kOp leaves whole values 0..255 there, which are written back.
template <BlockOp kOp>
SLUICE_ALWAYS_INLINE void BlockImage(MutableImageView img, const float* params) {
  for (int y = 0; y < img.height; ++y) {
    uint8_t* row = img.row(y);
    for (int x0 = 0; x0 < img.width; x0 += kPixelBlock) {
      OneBlock<kOp>(row + static_cast<size_t>(x0) * 3, std::min(kPixelBlock, img.width - x0),
                    params);
    }
  }
}

// F.rgb_to_grayscale(num_output_channels=3) on kPixelBlock pixels (Gray's arithmetic).
SLUICE_ALWAYS_INLINE void GrayBlock(float* __restrict r, float* __restrict g, float* __restrict b,
                                    const float*) {
  for (int i = 0; i < kPixelBlock; ++i) {
    const float l = (F32(0.2989) * r[i] + F32(0.587) * g[i]) + F32(0.114) * b[i];
    r[i] = g[i] = b[i] = static_cast<float>(static_cast<int>(l));
  }
}

void GrayPortable(MutableImageView img) { BlockImage<GrayBlock>(img, nullptr); }

// The sum of the image's uint8 grays, exactly.
uint64_t GraySumPortable(const ImageView& img) {
  uint64_t sum = 0;
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* px = img.row(y);
    uint32_t row_sum = 0;
    for (int x = 0; x < img.width; ++x) row_sum += Gray(px + x * 3);
    sum += row_sum;
  }
  return sum;
}

void SaturationPortable(MutableImageView img, const float* params) {
  BlockImage<SaturationBlock>(img, params);
}

void HuePortable(MutableImageView img, const float* params) { BlockImage<HueBlock>(img, params); }

// ---- WriteOutput ----

SLUICE_ALWAYS_INLINE float OutputValue(uint8_t x, const OutputSpec& spec, int c) {
  return static_cast<float>(x) * spec.scale[c] + spec.bias[c];
}

// Writes img through per-channel tables of the output element type: lut[c][x] is channel c's
// output for value x.
template <typename T>
void WriteThroughLut(const ImageView& img, Layout layout, const T (&lut)[3][256], T* out) {
  const size_t w = static_cast<size_t>(img.width);
  const size_t plane = w * static_cast<size_t>(img.height);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* px = img.row(y);
    if (layout == Layout::kNhwc) {
      T* o = out + static_cast<size_t>(y) * w * 3;
      for (size_t x = 0; x < w; ++x) {
        o[x * 3] = lut[0][px[x * 3]];
        o[x * 3 + 1] = lut[1][px[x * 3 + 1]];
        o[x * 3 + 2] = lut[2][px[x * 3 + 2]];
      }
    } else {
      T* o = out + static_cast<size_t>(y) * w;
      for (size_t x = 0; x < w; ++x) {
        o[x] = lut[0][px[x * 3]];
        o[plane + x] = lut[1][px[x * 3 + 1]];
        o[2 * plane + x] = lut[2][px[x * 3 + 2]];
      }
    }
  }
}

template <typename T, typename Convert>
void WriteConverted(const ImageView& img, const OutputSpec& spec, T* out, Convert convert) {
  T lut[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int x = 0; x < 256; ++x)
      lut[c][x] = convert(OutputValue(static_cast<uint8_t>(x), spec, c));
  }
  WriteThroughLut(img, spec.layout, lut, out);
}

void WriteOutputPortable(const ImageView& img, const OutputSpec& spec, void* dst) {
  switch (spec.dtype) {
    case DType::kUint8:
      if (spec.layout == Layout::kNhwc) {
        const size_t n = static_cast<size_t>(img.width) * 3;
        for (int y = 0; y < img.height; ++y) {
          std::memcpy(static_cast<uint8_t*>(dst) + static_cast<size_t>(y) * n, img.row(y), n);
        }
        return;
      }
      {
        const size_t w = static_cast<size_t>(img.width);
        const size_t plane = w * static_cast<size_t>(img.height);
        for (int y = 0; y < img.height; ++y) {
          const uint8_t* px = img.row(y);
          uint8_t* o = static_cast<uint8_t*>(dst) + static_cast<size_t>(y) * w;
          for (size_t x = 0; x < w; ++x) {
            o[x] = px[x * 3];
            o[plane + x] = px[x * 3 + 1];
            o[2 * plane + x] = px[x * 3 + 2];
          }
        }
      }
      return;
    case DType::kFloat32:
      return WriteConverted(img, spec, static_cast<float*>(dst), [](float v) { return v; });
    case DType::kFloat16:
      return WriteConverted(img, spec, static_cast<uint16_t*>(dst), FloatToHalf);
    case DType::kBFloat16:
      return WriteConverted(img, spec, static_cast<uint16_t*>(dst), FloatToBFloat16);
  }
}

// ---- JitterAndWrite ----

// A jitter step with its float32 parameters: brightness {ratio, 0}, contrast {ratio, (1 - ratio)
// * mean}, saturation {ratio, 1 - ratio}, hue {hue}.
struct BlockStep {
  JitterStep::Kind kind;
  float params[2];
};

// _blend(x, other, ratio) on kPixelBlock pixels, each channel blended with the same value: as
// AdjustBrightness's and AdjustContrast's tables compute it. params: ratio, (1 - ratio) * other.
SLUICE_ALWAYS_INLINE void LinearBlock(float* __restrict r, float* __restrict g, float* __restrict b,
                                      const float* params) {
  const float ratio = params[0], other = params[1];
  for (int i = 0; i < kPixelBlock; ++i) {
    r[i] = static_cast<float>(static_cast<int>(MinF(MaxF(0.0f, ratio * r[i] + other), 255.0f)));
    g[i] = static_cast<float>(static_cast<int>(MinF(MaxF(0.0f, ratio * g[i] + other), 255.0f)));
    b[i] = static_cast<float>(static_cast<int>(MinF(MaxF(0.0f, ratio * b[i] + other), 255.0f)));
  }
}

// Adds the uint8 grays of the block's first n pixels (Gray's arithmetic) to lanes, one per pixel
// (a sum across the lanes once per row, not per block).
SLUICE_ALWAYS_INLINE void AddGrays(const float* __restrict r, const float* __restrict g,
                                   const float* __restrict b, int n, uint32_t* __restrict lanes) {
  for (int i = 0; i < kPixelBlock; ++i) {
    const float l = (F32(0.2989) * r[i] + F32(0.587) * g[i]) + F32(0.114) * b[i];
    lanes[i] += i < n ? static_cast<uint32_t>(static_cast<int>(l)) : 0;
  }
}

struct PortableIo {
  // The m <= kPixelBlock pixels at px; a short block repeats its last pixel.
  static void Load(const uint8_t* px, int m, float* r, float* g, float* b) {
    for (int i = 0; i < kPixelBlock; ++i) {
      const int k = std::min(i, m - 1) * 3;
      r[i] = px[k];
      g[i] = px[k + 1];
      b[i] = px[k + 2];
    }
  }
  static void Store(const float* r, const float* g, const float* b, int m, uint8_t* px) {
    for (int i = 0; i < m; ++i) {
      px[i * 3] = static_cast<uint8_t>(r[i]);
      px[i * 3 + 1] = static_cast<uint8_t>(g[i]);
      px[i * 3 + 2] = static_cast<uint8_t>(b[i]);
    }
  }
  static void Hue(float* r, float* g, float* b, const float* params) { HueBlock(r, g, b, params); }
};

namespace portable {
#include "formats/pixel_ops_fused.inc"
}  // namespace portable

// Writes blocks as WriteOutputPortable does: through per-channel tables of T.
template <typename T>
class PortableWriter {
 public:
  template <typename Convert>
  PortableWriter(const ImageView& img, const OutputSpec& spec, T* out, Convert convert)
      : layout_(spec.layout),
        plane_(static_cast<size_t>(img.width) * static_cast<size_t>(img.height)),
        out_(out) {
    for (int c = 0; c < 3; ++c) {
      for (int x = 0; x < 256; ++x) lut_[c][x] = convert(static_cast<uint8_t>(x), c);
    }
  }

  void Write(const float* r, const float* g, const float* b, int m, size_t pixel) {
    const float* ch[3] = {r, g, b};
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < 3; ++c) {
        const T v = lut_[c][static_cast<uint8_t>(ch[c][i])];
        if (layout_ == Layout::kNhwc) {
          out_[(pixel + i) * 3 + c] = v;
        } else {
          out_[c * plane_ + pixel + i] = v;
        }
      }
    }
  }

 private:
  Layout layout_;
  size_t plane_;
  T* out_;
  T lut_[3][256];
};

template <typename T, typename Convert>
void StepsAndWritePortableAs(const ImageView& img, const BlockStep* steps, int n,
                             const OutputSpec& spec, T* out, Convert convert) {
  PortableWriter<T> writer(img, spec, out,
                           [&](uint8_t x, int c) { return convert(OutputValue(x, spec, c)); });
  portable::StepsAndWrite<PortableIo>(img, steps, n, writer);
}

void StepsAndWritePortable(const ImageView& img, const BlockStep* steps, int n,
                           const OutputSpec& spec, void* dst) {
  switch (spec.dtype) {
    case DType::kUint8: {
      PortableWriter<uint8_t> writer(img, spec, static_cast<uint8_t*>(dst),
                                     [](uint8_t x, int) { return x; });
      return portable::StepsAndWrite<PortableIo>(img, steps, n, writer);
    }
    case DType::kFloat32:
      return StepsAndWritePortableAs(img, steps, n, spec, static_cast<float*>(dst),
                                     [](float v) { return v; });
    case DType::kFloat16:
      return StepsAndWritePortableAs(img, steps, n, spec, static_cast<uint16_t*>(dst), FloatToHalf);
    case DType::kBFloat16:
      return StepsAndWritePortableAs(img, steps, n, spec, static_cast<uint16_t*>(dst),
                                     FloatToBFloat16);
  }
}

uint64_t StepsInPlacePortable(MutableImageView img, const BlockStep* steps, int n) {
  return portable::StepsInPlace<PortableIo>(img, steps, n);
}

// ---- GaussianBlur ----

// _get_gaussian_kernel1d in float32: torch.linspace(-(k-1)/2, (k-1)/2, k) (its two-sided
// formula), exp(-0.5 (x / sigma)^2), divided by its sum.
void GaussianKernel1d(int k, double sigma, float* out) {
  const float half = F32((k - 1) * 0.5);
  const float start = -half, end = half;
  const float step = (end - start) / static_cast<float>(k - 1);
  const int halfway = k / 2;
  float sum = 0;
  for (int i = 0; i < k; ++i) {
    const float x = i < halfway ? start + step * static_cast<float>(i)
                                : end - step * static_cast<float>(k - i - 1);
    const float z = x / F32(sigma);
    out[i] = std::exp(-0.5f * (z * z));
    sum += out[i];
  }
  for (int i = 0; i < k; ++i) out[i] /= sum;
}

// torch's reflect padding index for any i, with as many bounces as it takes (torchvision refuses
// padding >= the side; a kernel that wide still gets a defined result here).
int Reflect(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// Round half to even of v in [0, 2^23): adding and removing 2^23 leaves the rounded value under
// the default rounding mode, and vectorizes without SSE4.1.
SLUICE_ALWAYS_INLINE float RoundEven(float v) { return (v + 8388608.0f) - 8388608.0f; }

// out[i] = kj * in[i], then out[i] += kj * in[i] for each further tap: the taps added in order.
SLUICE_ALWAYS_INLINE void FirstTap(float kj, const float* __restrict in, size_t n,
                                   float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = kj * in[i];
}
SLUICE_ALWAYS_INLINE void AddTap(float kj, const float* __restrict in, size_t n,
                                 float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] += kj * in[i];
}

// Separable: each source row is filtered horizontally once, into a ring of k rows, and each
// output row is the vertical sum over the ring, rounded half to even as torch.round. torch
// convolves with the 2-D outer product instead; the sums differ only in float rounding.
// work: BlurWorkSize floats.
size_t BlurWorkSize(int width, int height, int k) {
  const size_t row_len = static_cast<size_t>(width) * 3;
  return (static_cast<size_t>(width) + k) * 3 + row_len +
         static_cast<size_t>(std::min(k, height)) * row_len;
}

SLUICE_ALWAYS_INLINE void BlurImage(MutableImageView img, int k, const float* kern, float* work) {
  const int r = k / 2, w = img.width;
  const size_t row_len = static_cast<size_t>(w) * 3;
  const int ring = std::min(k, img.height);
  float* padded = work;
  float* acc = padded + (static_cast<size_t>(w) + k) * 3;
  float* rows = acc + row_len;
  auto ring_row = [&](int s) { return rows + static_cast<size_t>(s % ring) * row_len; };

  int next = 0;  // the next source row to filter horizontally
  for (int y = 0; y < img.height; ++y) {
    for (; next <= std::min(img.height - 1, y + r); ++next) {
      const uint8_t* src = img.row(next);
      for (size_t i = 0; i < row_len; ++i) padded[static_cast<size_t>(r) * 3 + i] = src[i];
      for (int x = -r; x < 0; ++x) {
        for (int c = 0; c < 3; ++c) {
          padded[static_cast<size_t>(x + r) * 3 + c] = src[Reflect(x, w) * 3 + c];
          padded[static_cast<size_t>(w - x - 1 + r) * 3 + c] = src[Reflect(w - x - 1, w) * 3 + c];
        }
      }
      float* out = ring_row(next);
      FirstTap(kern[0], padded, row_len, out);
      for (int j = 1; j < k; ++j)
        AddTap(kern[j], padded + static_cast<size_t>(j) * 3, row_len, out);
    }
    FirstTap(kern[0], ring_row(Reflect(y - r, img.height)), row_len, acc);
    for (int j = 1; j < k; ++j)
      AddTap(kern[j], ring_row(Reflect(y - r + j, img.height)), row_len, acc);
    uint8_t* dst = img.row(y);
    for (size_t i = 0; i < row_len; ++i) {
      dst[i] = static_cast<uint8_t>(static_cast<int>(MinF(RoundEven(acc[i]), 255.0f)));
    }
  }
}

void BlurPortable(MutableImageView img, int k, const float* kern, float* work) {
  BlurImage(img, k, kern, work);
}

#if SLUICE_HAVE_X86_PIXEL_KERNELS

#define SLUICE_AVX2 __attribute__((target("avx2,f16c")))
#define SLUICE_AVX2_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

bool CpuHasAvx2F16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}

SLUICE_AVX2_INLINE __m256 Eq(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
// mask ? yes : no, per lane.
SLUICE_AVX2_INLINE __m256 Sel(__m256 mask, __m256 yes, __m256 no) {
  return _mm256_blendv_ps(no, yes, mask);
}
SLUICE_AVX2_INLINE __m256 Clamp01(__m256 v) {
  return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}
// x * 255.999 truncated, as a float.
SLUICE_AVX2_INLINE __m256 ToU8Float(__m256 x, __m256 to_u8) {
  return _mm256_cvtepi32_ps(_mm256_cvttps_epi32(_mm256_mul_ps(x, to_u8)));
}

// HueBlock's arithmetic, eight pixels at a time, the selects as blends.
SLUICE_AVX2 void HueBlockAvx2(float* r, float* g, float* b, const float* params) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  const __m256 k255 = _mm256_set1_ps(255.0f), to_u8 = _mm256_set1_ps(F32(255.0 + 1.0 - 1e-3));
  const __m256 hue = _mm256_set1_ps(params[0]), six = _mm256_set1_ps(6.0f);
  for (int i = 0; i < kPixelBlock; i += 8) {
    const __m256 rf = _mm256_div_ps(_mm256_load_ps(r + i), k255);
    const __m256 gf = _mm256_div_ps(_mm256_load_ps(g + i), k255);
    const __m256 bf = _mm256_div_ps(_mm256_load_ps(b + i), k255);
    const __m256 maxc = _mm256_max_ps(_mm256_max_ps(rf, gf), bf);
    const __m256 minc = _mm256_min_ps(_mm256_min_ps(rf, gf), bf);
    const __m256 eqc = Eq(maxc, minc);
    const __m256 cr = _mm256_sub_ps(maxc, minc);
    const __m256 s = _mm256_div_ps(cr, Sel(eqc, one, maxc));
    const __m256 crd = Sel(eqc, one, cr);
    const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, rf), crd);
    const __m256 gc = _mm256_div_ps(_mm256_sub_ps(maxc, gf), crd);
    const __m256 bc = _mm256_div_ps(_mm256_sub_ps(maxc, bf), crd);
    const __m256 hr = _mm256_sub_ps(bc, gc);
    const __m256 hg = _mm256_sub_ps(_mm256_add_ps(rc, _mm256_set1_ps(2.0f)), bc);
    const __m256 hb = _mm256_sub_ps(_mm256_add_ps(gc, _mm256_set1_ps(4.0f)), rc);
    __m256 h = Sel(Eq(maxc, rf), hr, Sel(Eq(maxc, gf), hg, hb));
    h = _mm256_add_ps(_mm256_div_ps(h, six), one);
    h = Sel(_mm256_cmp_ps(h, one, _CMP_GE_OQ), _mm256_sub_ps(h, one), h);
    h = _mm256_add_ps(h, hue);
    h = Sel(_mm256_cmp_ps(h, one, _CMP_GE_OQ), _mm256_sub_ps(h, one),
            Sel(_mm256_cmp_ps(h, zero, _CMP_LT_OQ), _mm256_add_ps(h, one), h));

    const __m256 h6 = _mm256_mul_ps(h, six);
    const __m256 fi = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(h6));
    const __m256 f = _mm256_sub_ps(h6, fi);
    const __m256 sector = Sel(_mm256_cmp_ps(fi, six, _CMP_GE_OQ), _mm256_sub_ps(fi, six), fi);
    const __m256 v = maxc;
    const __m256 p = Clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, s)));
    const __m256 q = Clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, f))));
    const __m256 t =
        Clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, _mm256_sub_ps(one, f)))));
    const __m256 s0 = Eq(sector, zero), s1 = Eq(sector, one);
    const __m256 s2 = Eq(sector, _mm256_set1_ps(2.0f)), s3 = Eq(sector, _mm256_set1_ps(3.0f));
    const __m256 s4 = Eq(sector, _mm256_set1_ps(4.0f)), s5 = Eq(sector, _mm256_set1_ps(5.0f));
    const __m256 ro = Sel(_mm256_or_ps(s0, s5), v, Sel(s1, q, Sel(s4, t, p)));
    const __m256 go = Sel(s0, t, Sel(_mm256_or_ps(s1, s2), v, Sel(s3, q, p)));
    const __m256 bo = Sel(_mm256_or_ps(s0, s1), p, Sel(s2, t, Sel(s5, q, v)));
    _mm256_store_ps(r + i, ToU8Float(ro, to_u8));
    _mm256_store_ps(g + i, ToU8Float(go, to_u8));
    _mm256_store_ps(b + i, ToU8Float(bo, to_u8));
  }
}

struct Planes16 {
  __m128i r, g, b;
};

// The bytes of a, b and c that the three masks pick (pshufb: a negative index picks a zero).
SLUICE_AVX2_INLINE __m128i Pick3(__m128i a, __m128i b, __m128i c, __m128i ma, __m128i mb,
                                 __m128i mc) {
  return _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ma), _mm_shuffle_epi8(b, mb)),
                      _mm_shuffle_epi8(c, mc));
}

// 16 interleaved RGB pixels (48 bytes) split into their three channels.
SLUICE_AVX2_INLINE Planes16 Deinterleave16(const uint8_t* p) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32));
  constexpr char z = -1;
  Planes16 out;
  out.r = Pick3(a, b, c, _mm_setr_epi8(0, 3, 6, 9, 12, 15, z, z, z, z, z, z, z, z, z, z),
                _mm_setr_epi8(z, z, z, z, z, z, 2, 5, 8, 11, 14, z, z, z, z, z),
                _mm_setr_epi8(z, z, z, z, z, z, z, z, z, z, z, 1, 4, 7, 10, 13));
  out.g = Pick3(a, b, c, _mm_setr_epi8(1, 4, 7, 10, 13, z, z, z, z, z, z, z, z, z, z, z),
                _mm_setr_epi8(z, z, z, z, z, 0, 3, 6, 9, 12, 15, z, z, z, z, z),
                _mm_setr_epi8(z, z, z, z, z, z, z, z, z, z, z, 2, 5, 8, 11, 14));
  out.b = Pick3(a, b, c, _mm_setr_epi8(2, 5, 8, 11, 14, z, z, z, z, z, z, z, z, z, z, z),
                _mm_setr_epi8(z, z, z, z, z, 1, 4, 7, 10, 13, z, z, z, z, z, z),
                _mm_setr_epi8(z, z, z, z, z, z, z, z, z, z, 0, 3, 6, 9, 12, 15));
  return out;
}

// The low 8 bytes of v as floats.
SLUICE_AVX2_INLINE __m256 Low8ToFloat(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

// The inverse of Deinterleave16: 16 pixels' channels interleaved into 48 bytes at p.
SLUICE_AVX2_INLINE void Interleave16(__m128i r, __m128i g, __m128i b, uint8_t* p) {
  // Output byte j of vector v is channel (16 v + j) % 3's byte (16 v + j) / 3.
  alignas(16) static constexpr auto kMasks = [] {
    struct {
      char m[3][3][16];  // [output vector][channel][byte]
    } t{};
    for (int v = 0; v < 3; ++v) {
      for (int c = 0; c < 3; ++c) {
        for (int j = 0; j < 16; ++j) {
          const int at = 16 * v + j;
          t.m[v][c][j] = at % 3 == c ? static_cast<char>(at / 3) : static_cast<char>(-1);
        }
      }
    }
    return t;
  }();
  const __m128i planes[3] = {r, g, b};
  for (int v = 0; v < 3; ++v) {
    __m128i out = _mm_setzero_si128();
    for (int c = 0; c < 3; ++c) {
      const __m128i mask = _mm_load_si128(reinterpret_cast<const __m128i*>(kMasks.m[v][c]));
      out = _mm_or_si128(out, _mm_shuffle_epi8(planes[c], mask));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16 * v), out);
  }
}

// 16 whole floats 0..255 at f as bytes.
SLUICE_AVX2_INLINE __m128i FloatsToBytes16(const float* f) {
  const __m256i lo = _mm256_cvttps_epi32(_mm256_load_ps(f));
  const __m256i hi = _mm256_cvttps_epi32(_mm256_load_ps(f + 8));
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
  return _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
}

// kPixelBlock interleaved RGB pixels at px, as floats in r, g and b.
SLUICE_AVX2_INLINE void LoadBlockAvx2(const uint8_t* px, float* r, float* g, float* b) {
  const Planes16 p = Deinterleave16(px);
  float* const out[3] = {r, g, b};
  const __m128i in[3] = {p.r, p.g, p.b};
  for (int c = 0; c < 3; ++c) {
    _mm256_store_ps(out[c], Low8ToFloat(in[c]));
    _mm256_store_ps(out[c] + 8, Low8ToFloat(_mm_srli_si128(in[c], 8)));
  }
}

// BlockImage with the channels split and joined by shuffles.
template <BlockOp kOp>
SLUICE_AVX2_INLINE void BlockImageAvx2(MutableImageView img, const float* params) {
  alignas(32) float r[kPixelBlock], g[kPixelBlock], b[kPixelBlock];
  for (int y = 0; y < img.height; ++y) {
    uint8_t* row = img.row(y);
    int x0 = 0;
    for (; x0 + kPixelBlock <= img.width; x0 += kPixelBlock) {
      uint8_t* px = row + static_cast<size_t>(x0) * 3;
      LoadBlockAvx2(px, r, g, b);
      kOp(r, g, b, params);
      Interleave16(FloatsToBytes16(r), FloatsToBytes16(g), FloatsToBytes16(b), px);
    }
    if (x0 < img.width) OneBlock<kOp>(row + static_cast<size_t>(x0) * 3, img.width - x0, params);
  }
}

SLUICE_AVX2 uint64_t GraySumAvx2(const ImageView& img) {
  const __m256 wr = _mm256_set1_ps(F32(0.2989)), wg = _mm256_set1_ps(F32(0.587));
  const __m256 wb = _mm256_set1_ps(F32(0.114));
  uint64_t sum = 0;
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* row = img.row(y);
    __m256i acc = _mm256_setzero_si256();  // at most 255 * width / 8 per lane
    int x = 0;
    for (; x + 16 <= img.width; x += 16) {
      const Planes16 p = Deinterleave16(row + static_cast<size_t>(x) * 3);
      for (int half = 0; half < 2; ++half) {
        const __m128i r8 = half ? _mm_srli_si128(p.r, 8) : p.r;
        const __m128i g8 = half ? _mm_srli_si128(p.g, 8) : p.g;
        const __m128i b8 = half ? _mm_srli_si128(p.b, 8) : p.b;
        const __m256 l = _mm256_add_ps(
            _mm256_add_ps(_mm256_mul_ps(wr, Low8ToFloat(r8)), _mm256_mul_ps(wg, Low8ToFloat(g8))),
            _mm256_mul_ps(wb, Low8ToFloat(b8)));
        acc = _mm256_add_epi32(acc, _mm256_cvttps_epi32(l));
      }
    }
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    uint64_t row_sum = 0;
    for (uint32_t v : lanes) row_sum += v;
    for (; x < img.width; ++x) row_sum += Gray(row + static_cast<size_t>(x) * 3);
    sum += row_sum;
  }
  return sum;
}

SLUICE_AVX2 void HueAvx2(MutableImageView img, const float* params) {
  BlockImageAvx2<HueBlockAvx2>(img, params);
}

SLUICE_AVX2 void SaturationAvx2(MutableImageView img, const float* params) {
  BlockImageAvx2<SaturationBlock>(img, params);
}

SLUICE_AVX2 void GrayAvx2(MutableImageView img) { BlockImageAvx2<GrayBlock>(img, nullptr); }

SLUICE_AVX2 void BlurAvx2(MutableImageView img, int k, const float* kern, float* work) {
  BlurImage(img, k, kern, work);
}

// Eight values stored as kDType at out + i (elements).
template <DType kDType>
SLUICE_AVX2_INLINE void Store8(__m256 v, void* out, size_t i) {
  if constexpr (kDType == DType::kFloat32) {
    _mm256_storeu_ps(static_cast<float*>(out) + i, v);
  } else if constexpr (kDType == DType::kFloat16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    // FloatToBFloat16, eight at a time.
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i),
                     _mm256_castsi256_si128(packed));
  }
}

template <DType kDType>
SLUICE_AVX2_INLINE void StoreScalar(float v, void* out, size_t i) {
  if constexpr (kDType == DType::kFloat32) {
    static_cast<float*>(out)[i] = v;
  } else if constexpr (kDType == DType::kFloat16) {
    static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(
        _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT), 0));
  } else {
    static_cast<uint16_t*>(out)[i] = FloatToBFloat16(v);
  }
}

// The scale and bias of three consecutive 8-value vectors of NHWC values, whose channels cycle
// r g b r g b r g, b r g ..., g b r ...
SLUICE_AVX2_INLINE void CycleConstants(const OutputSpec& spec, __m256* scale, __m256* bias) {
  for (int k = 0; k < 3; ++k) {
    float s[8], b[8];
    for (int i = 0; i < 8; ++i) {
      s[i] = spec.scale[(k * 8 + i) % 3];
      b[i] = spec.bias[(k * 8 + i) % 3];
    }
    scale[k] = _mm256_loadu_ps(s);
    bias[k] = _mm256_loadu_ps(b);
  }
}

template <DType kDType>
SLUICE_AVX2 void WriteFloatAvx2(const ImageView& img, const OutputSpec& spec, void* dst) {
  const size_t w = static_cast<size_t>(img.width);
  const size_t plane = w * static_cast<size_t>(img.height);
  if (spec.layout == Layout::kNchw) {
    __m256 scale[3], bias[3];
    for (int c = 0; c < 3; ++c) {
      scale[c] = _mm256_set1_ps(spec.scale[c]);
      bias[c] = _mm256_set1_ps(spec.bias[c]);
    }
    for (int y = 0; y < img.height; ++y) {
      const uint8_t* px = img.row(y);
      const size_t base = static_cast<size_t>(y) * w;
      size_t x = 0;
      for (; x + 16 <= w; x += 16) {
        const Planes16 p = Deinterleave16(px + x * 3);
        const __m128i ch[3] = {p.r, p.g, p.b};
        for (int c = 0; c < 3; ++c) {
          const __m256 lo = Low8ToFloat(ch[c]);
          const __m256 hi = Low8ToFloat(_mm_srli_si128(ch[c], 8));
          const size_t at = c * plane + base + x;
          Store8<kDType>(_mm256_add_ps(_mm256_mul_ps(lo, scale[c]), bias[c]), dst, at);
          Store8<kDType>(_mm256_add_ps(_mm256_mul_ps(hi, scale[c]), bias[c]), dst, at + 8);
        }
      }
      for (; x < w; ++x) {
        for (int c = 0; c < 3; ++c) {
          StoreScalar<kDType>(OutputValue(px[x * 3 + c], spec, c), dst, c * plane + base + x);
        }
      }
    }
    return;
  }
  // NHWC: eight pixels are three vectors whose channels cycle r g b r g b r g, b r g ..., g b r ...
  __m256 scale[3], bias[3];
  CycleConstants(spec, scale, bias);
  const size_t n = w * 3;
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* px = img.row(y);
    const size_t base = static_cast<size_t>(y) * n;
    size_t i = 0;
    for (; i + 24 <= n; i += 24) {
      for (int k = 0; k < 3; ++k) {
        const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(px + i + k * 8));
        Store8<kDType>(_mm256_add_ps(_mm256_mul_ps(Low8ToFloat(v), scale[k]), bias[k]), dst,
                       base + i + k * 8);
      }
    }
    for (; i < n; ++i) StoreScalar<kDType>(OutputValue(px[i], spec, i % 3), dst, base + i);
  }
}

SLUICE_AVX2 void WriteUint8NchwAvx2(const ImageView& img, uint8_t* dst) {
  const size_t w = static_cast<size_t>(img.width);
  const size_t plane = w * static_cast<size_t>(img.height);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* px = img.row(y);
    uint8_t* o = dst + static_cast<size_t>(y) * w;
    size_t x = 0;
    for (; x + 16 <= w; x += 16) {
      const Planes16 p = Deinterleave16(px + x * 3);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + x), p.r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + plane + x), p.g);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * plane + x), p.b);
    }
    for (; x < w; ++x) {
      o[x] = px[x * 3];
      o[plane + x] = px[x * 3 + 1];
      o[2 * plane + x] = px[x * 3 + 2];
    }
  }
}

SLUICE_AVX2 void FloatsToHalfF16c(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Store8<DType::kFloat16>(_mm256_loadu_ps(in + i), out, i);
  for (; i < n; ++i) StoreScalar<DType::kFloat16>(in[i], out, i);
}

// False when this op has no AVX2 kernel (uint8 NHWC is a copy either way).
bool WriteOutputAvx2(const ImageView& img, const OutputSpec& spec, void* dst) {
  switch (spec.dtype) {
    case DType::kUint8:
      if (spec.layout == Layout::kNhwc) return false;
      WriteUint8NchwAvx2(img, static_cast<uint8_t*>(dst));
      return true;
    case DType::kFloat32:
      WriteFloatAvx2<DType::kFloat32>(img, spec, dst);
      return true;
    case DType::kFloat16:
      WriteFloatAvx2<DType::kFloat16>(img, spec, dst);
      return true;
    case DType::kBFloat16:
      WriteFloatAvx2<DType::kBFloat16>(img, spec, dst);
      return true;
  }
  return false;
}

// _blend(x, other, ratio) on every channel value, as a table of Blend(ratio * x, other) gives it,
// 16 values at a time.
SLUICE_AVX2 void LinearAvx2(MutableImageView img, float ratio, float other) {
  const __m256 vr = _mm256_set1_ps(ratio), vo = _mm256_set1_ps(other);
  const __m256 zero = _mm256_setzero_ps(), k255 = _mm256_set1_ps(255.0f);
  const size_t n = static_cast<size_t>(img.width) * 3;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = img.row(y);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      __m256i half[2];
      for (int h = 0; h < 2; ++h) {
        const __m256 v = Low8ToFloat(h ? _mm_srli_si128(x, 8) : x);
        // max(v, 0) maps a NaN (a NaN factor) to 0, as TruncU8 does.
        const __m256 c =
            _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(_mm256_mul_ps(vr, v), vo), zero), k255);
        half[h] = _mm256_cvttps_epi32(c);
      }
      const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(half[0], half[1]), 0xD8);
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(p + i),
          _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
    }
    for (; i < n; ++i) p[i] = Blend(ratio * static_cast<float>(p[i]), other);
  }
}

// ---- JitterAndWrite's AVX2 path ----

struct Avx2Io {
  static SLUICE_AVX2_INLINE void Load(const uint8_t* px, int m, float* r, float* g, float* b) {
    if (m < kPixelBlock) return PortableIo::Load(px, m, r, g, b);
    LoadBlockAvx2(px, r, g, b);
  }
  static SLUICE_AVX2_INLINE void Store(const float* r, const float* g, const float* b, int m,
                                       uint8_t* px) {
    if (m < kPixelBlock) return PortableIo::Store(r, g, b, m, px);
    Interleave16(FloatsToBytes16(r), FloatsToBytes16(g), FloatsToBytes16(b), px);
  }
  static SLUICE_AVX2_INLINE void Hue(float* r, float* g, float* b, const float* params) {
    HueBlockAvx2(r, g, b, params);
  }
};

// The same templates compiled for AVX2, so that Avx2Io's kernels inline into them.
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#include "formats/pixel_ops_fused.inc"
#pragma GCC pop_options
}  // namespace avx2

// Writes blocks as WriteOutputAvx2 does, kDType values in spec.layout.
template <DType kDType>
class Avx2Writer {
 public:
  SLUICE_AVX2_INLINE Avx2Writer(const ImageView& img, const OutputSpec& spec, void* out)
      : spec_(spec),
        plane_(static_cast<size_t>(img.width) * static_cast<size_t>(img.height)),
        out_(out) {
    for (int c = 0; c < 3; ++c) {
      scale_[c] = _mm256_set1_ps(spec.scale[c]);
      bias_[c] = _mm256_set1_ps(spec.bias[c]);
    }
    // NHWC: eight values' channels cycle r g b r g b r g, b r g ..., g b r ...
    CycleConstants(spec, cycle_scale_, cycle_bias_);
  }

  SLUICE_AVX2_INLINE void Write(const float* r, const float* g, const float* b, int m,
                                size_t pixel) {
    const float* ch[3] = {r, g, b};
    if (m < kPixelBlock) return WriteShort(ch, m, pixel);
    const bool nhwc = spec_.layout == Layout::kNhwc;
    if constexpr (kDType == DType::kUint8) {
      uint8_t* out = static_cast<uint8_t*>(out_);
      const __m128i bytes[3] = {FloatsToBytes16(r), FloatsToBytes16(g), FloatsToBytes16(b)};
      if (nhwc) return Interleave16(bytes[0], bytes[1], bytes[2], out + pixel * 3);
      for (int c = 0; c < 3; ++c) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c * plane_ + pixel), bytes[c]);
      }
    } else {
      if (!nhwc) {
        for (int c = 0; c < 3; ++c) {
          const size_t at = c * plane_ + pixel;
          for (int h = 0; h < kPixelBlock; h += 8) {
            const __m256 v = _mm256_load_ps(ch[c] + h);
            Store8<kDType>(_mm256_add_ps(_mm256_mul_ps(v, scale_[c]), bias_[c]), out_, at + h);
          }
        }
        return;
      }
      // The block interleaved as bytes, then converted eight values at a time.
      alignas(16) uint8_t px[kPixelBlock * 3];
      Interleave16(FloatsToBytes16(r), FloatsToBytes16(g), FloatsToBytes16(b), px);
      for (int j = 0; j < 6; ++j) {
        const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(px + j * 8));
        Store8<kDType>(
            _mm256_add_ps(_mm256_mul_ps(Low8ToFloat(v), cycle_scale_[j % 3]), cycle_bias_[j % 3]),
            out_, pixel * 3 + j * 8);
      }
    }
  }

 private:
  SLUICE_AVX2_INLINE void WriteShort(const float* const* ch, int m, size_t pixel) {
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t x = static_cast<uint8_t>(ch[c][i]);
        const size_t at =
            spec_.layout == Layout::kNhwc ? (pixel + i) * 3 + c : c * plane_ + pixel + i;
        if constexpr (kDType == DType::kUint8) {
          static_cast<uint8_t*>(out_)[at] = x;
        } else {
          StoreScalar<kDType>(OutputValue(x, spec_, c), out_, at);
        }
      }
    }
  }

  const OutputSpec& spec_;
  size_t plane_;
  void* out_;
  __m256 scale_[3], bias_[3], cycle_scale_[3], cycle_bias_[3];
};

template <DType kDType>
SLUICE_AVX2 void StepsAndWriteAvx2As(const ImageView& img, const BlockStep* steps, int n,
                                     const OutputSpec& spec, void* dst) {
  Avx2Writer<kDType> writer(img, spec, dst);
  avx2::StepsAndWrite<Avx2Io>(img, steps, n, writer);
}

void StepsAndWriteAvx2(const ImageView& img, const BlockStep* steps, int n, const OutputSpec& spec,
                       void* dst) {
  switch (spec.dtype) {
    case DType::kUint8:
      return StepsAndWriteAvx2As<DType::kUint8>(img, steps, n, spec, dst);
    case DType::kFloat32:
      return StepsAndWriteAvx2As<DType::kFloat32>(img, steps, n, spec, dst);
    case DType::kFloat16:
      return StepsAndWriteAvx2As<DType::kFloat16>(img, steps, n, spec, dst);
    case DType::kBFloat16:
      return StepsAndWriteAvx2As<DType::kBFloat16>(img, steps, n, spec, dst);
  }
}

SLUICE_AVX2 uint64_t StepsInPlaceAvx2(MutableImageView img, const BlockStep* steps, int n) {
  return avx2::StepsInPlace<Avx2Io>(img, steps, n);
}

#else
bool CpuHasAvx2F16c() { return false; }
#endif

bool UseSimd(Kernels kernels) { return kernels == Kernels::kBest && CpuHasAvx2F16c(); }

// Blend(ratio * x, other) on every channel value.
void Linear(MutableImageView img, float ratio, float other, Kernels kernels) {
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels)) return LinearAvx2(img, ratio, other);
#endif
  uint8_t lut[256];
  for (int x = 0; x < 256; ++x) lut[x] = Blend(ratio * static_cast<float>(x), other);
  ApplyLut(img, lut);
}

}  // namespace

// ---- Per-value ops: a table per call ----

void AdjustBrightness(MutableImageView img, double factor) {
  pixel_internal::AdjustBrightness(img, factor, Kernels::kBest);
}

void AdjustContrast(MutableImageView img, double factor) {
  pixel_internal::AdjustContrast(img, factor, Kernels::kBest);
}

void AdjustSaturation(MutableImageView img, double factor) {
  pixel_internal::AdjustSaturation(img, factor, Kernels::kBest);
}

void AdjustHue(MutableImageView img, double hue_factor) {
  pixel_internal::AdjustHue(img, hue_factor, Kernels::kBest);
}

void ToGrayscale(MutableImageView img) { pixel_internal::ToGrayscale(img, Kernels::kBest); }

void Solarize(MutableImageView img, double threshold) {
  // torch compares the uint8 values with the threshold in float32.
  const float t = F32(threshold);
  uint8_t lut[256];
  for (int x = 0; x < 256; ++x) {
    lut[x] = static_cast<float>(x) >= t ? static_cast<uint8_t>(255 - x) : static_cast<uint8_t>(x);
  }
  ApplyLut(img, lut);
}

void Posterize(MutableImageView img, int bits) {
  if (bits >= 8) return;
  const uint8_t mask = bits <= 0 ? 0 : static_cast<uint8_t>(0xFF << (8 - bits));
  uint8_t lut[256];
  for (int x = 0; x < 256; ++x) lut[x] = static_cast<uint8_t>(x & mask);
  ApplyLut(img, lut);
}

void GaussianBlur(MutableImageView img, int kernel_size, double sigma,
                  std::vector<float>* scratch) {
  pixel_internal::GaussianBlur(img, kernel_size, sigma, scratch, Kernels::kBest);
}

void WriteOutput(const ImageView& img, const OutputSpec& spec, void* dst) {
  pixel_internal::WriteOutput(img, spec, dst, Kernels::kBest);
}

void JitterAndWrite(MutableImageView img, const JitterStep* steps, int n, const OutputSpec& spec,
                    void* dst) {
  pixel_internal::JitterAndWrite(img, steps, n, spec, dst, Kernels::kBest);
}

// ---- bfloat16 and float16 ----


uint16_t FloatToHalf(float f) {
  // VCVTPS2PH's results: round to nearest even, overflow to infinity, subnormals kept, a NaN
  // quieted with the top of its payload.
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));
  if (a >= 0x38800000) {          // 2^-14, the smallest normal half, and above
    uint32_t m = a - 0x38000000;  // exponent rebiased from 127 to 15
    m = (m + 0x0FFF + ((m >> 13) & 1)) >> 13;
    return static_cast<uint16_t>(sign | std::min<uint32_t>(m, 0x7C00));
  }
  // Subnormal halves: |f| + 0.5 puts |f| / 2^-24, rounded to nearest even, in the low bits.
  return static_cast<uint16_t>(sign | (FloatBits(BitsFloat(a) + 0.5f) - 0x3F000000));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0x1F) return BitsFloat(sign | 0x7F800000 | (m << 13));
  if (e == 0) return BitsFloat(sign | FloatBits(static_cast<float>(m) * 0x1p-24f));
  return BitsFloat(sign | ((e + 112) << 23) | (m << 13));
}

namespace pixel_internal {

bool HaveSimdKernels() { return CpuHasAvx2F16c(); }

void AdjustContrast(MutableImageView img, double factor, Kernels kernels) {
  if (img.width <= 0 || img.height <= 0) return;
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  const uint64_t sum = UseSimd(kernels) ? GraySumAvx2(img.view()) : GraySumPortable(img.view());
#else
  const uint64_t sum = GraySumPortable(img.view());
#endif
  // torch.mean: the float32 sum (exact below 2^24) divided by the count.
  const float mean =
      static_cast<float>(sum) / static_cast<float>(static_cast<int64_t>(img.width) * img.height);
  Linear(img, F32(factor), F32(1.0 - factor) * mean, kernels);
}

void AdjustBrightness(MutableImageView img, double factor, Kernels kernels) {
  // (1 - ratio) * zeros adds a zero.
  Linear(img, F32(factor), 0.0f, kernels);
}

void ToGrayscale(MutableImageView img, Kernels kernels) {
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels)) return GrayAvx2(img);
#endif
  GrayPortable(img);
}

void AdjustSaturation(MutableImageView img, double factor, Kernels kernels) {
  const float params[2] = {F32(factor), F32(1.0 - factor)};
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels)) return SaturationAvx2(img, params);
#endif
  SaturationPortable(img, params);
}

void AdjustHue(MutableImageView img, double hue_factor, Kernels kernels) {
  const float params[1] = {F32(hue_factor)};
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels)) return HueAvx2(img, params);
#endif
  HuePortable(img, params);
}

void WriteOutput(const ImageView& img, const OutputSpec& spec, void* dst, Kernels kernels) {
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels) && WriteOutputAvx2(img, spec, dst)) return;
#endif
  WriteOutputPortable(img, spec, dst);
}

void JitterAndWrite(MutableImageView img, const JitterStep* steps, int n, const OutputSpec& spec,
                    void* dst, Kernels kernels) {
  if (img.width <= 0 || img.height <= 0) return;
  const bool simd = UseSimd(kernels);
  BlockStep resolved[kMaxJitterSteps];
  int start = 0;  // the first step not yet applied to img
  for (int i = 0; i < n; ++i) {
    const JitterStep::Kind kind = steps[i].kind;
    const float ratio = F32(steps[i].factor);
    switch (kind) {
      case JitterStep::Kind::kBrightness:
        resolved[i] = BlockStep{kind, {ratio, 0.0f}};
        break;
      case JitterStep::Kind::kSaturation:
        resolved[i] = BlockStep{kind, {ratio, F32(1.0 - steps[i].factor)}};
        break;
      case JitterStep::Kind::kHue:
        resolved[i] = BlockStep{kind, {ratio, 0.0f}};
        break;
      case JitterStep::Kind::kContrast: {
        uint64_t sum;
#if SLUICE_HAVE_X86_PIXEL_KERNELS
        if (simd) {
          sum = i == start ? GraySumAvx2(img.view())
                           : StepsInPlaceAvx2(img, resolved + start, i - start);
        } else
#endif
        {
          sum = i == start ? GraySumPortable(img.view())
                           : StepsInPlacePortable(img, resolved + start, i - start);
        }
        start = i;
        // As AdjustContrast: the float32 mean of the grays, folded into the blend's other term.
        const float mean = static_cast<float>(sum) /
                           static_cast<float>(static_cast<int64_t>(img.width) * img.height);
        resolved[i] = BlockStep{kind, {ratio, F32(1.0 - steps[i].factor) * mean}};
        break;
      }
    }
  }
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (simd) return StepsAndWriteAvx2(img.view(), resolved + start, n - start, spec, dst);
#endif
  (void)simd;
  StepsAndWritePortable(img.view(), resolved + start, n - start, spec, dst);
}

void GaussianBlur(MutableImageView img, int kernel_size, double sigma, std::vector<float>* scratch,
                  Kernels kernels) {
  if (kernel_size <= 1 || kernel_size % 2 == 0 || !(sigma > 0) || img.width <= 0 ||
      img.height <= 0) {
    return;
  }
  scratch->resize(kernel_size + BlurWorkSize(img.width, img.height, kernel_size));
  float* kern = scratch->data();
  GaussianKernel1d(kernel_size, sigma, kern);
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels)) return BlurAvx2(img, kernel_size, kern, kern + kernel_size);
#endif
  BlurPortable(img, kernel_size, kern, kern + kernel_size);
}

void FloatsToHalf(const float* in, size_t n, uint16_t* out, Kernels kernels) {
#if SLUICE_HAVE_X86_PIXEL_KERNELS
  if (UseSimd(kernels)) return FloatsToHalfF16c(in, n, out);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

}  // namespace pixel_internal
}  // namespace sluice

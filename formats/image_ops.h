// Pure pixel kernels on interleaved RGB uint8 images: crop views, resize, flip, noise-free helpers.
// They write into memory the caller provides, so the pipeline can aim them at a batch slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace sluice {

// A read-only window on RGB pixels; stride is in bytes between rows.
struct ImageView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  size_t stride = 0;

  const uint8_t* row(int y) const { return data + static_cast<size_t>(y) * stride; }
  // REQUIRES: the rectangle lies inside the image.
  ImageView Crop(int x, int y, int w, int h) const {
    return ImageView{data + static_cast<size_t>(y) * stride + static_cast<size_t>(x) * 3, w, h,
                     stride};
  }
};

// An owned, tightly packed RGB image.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3

  // Grows the buffer to exactly the new size (std::vector's growth could double it, past what a
  // decoder's memory estimate counts); a smaller size keeps the capacity.
  void Resize(int w, int h) {
    width = w;
    height = h;
    const size_t bytes = static_cast<size_t>(w) * h * 3;
    if (bytes > pixels.capacity()) pixels.reserve(bytes);
    pixels.resize(bytes);
  }
  ImageView view() const {
    return ImageView{pixels.data(), width, height, static_cast<size_t>(width) * 3};
  }
};

// How Resize resamples (proto Interpolation) and mirrors. Every filter is antialiased as Pillow's
// and torchvision's (antialias=True) are: widened by the scale when shrinking.
enum class ResizeFilter { kBilinear = 0, kArea = 1, kBicubic = 2 };
struct ResizeOptions {
  ResizeFilter filter = ResizeFilter::kBilinear;
  bool flip_horizontal = false;
  bool flip_vertical = false;
};

// Resizes src into dst (dst_width x dst_height RGB, rows dst_stride bytes apart); when
// flip_horizontal is set, also mirrors the result left-right, at no extra cost (the pass that
// writes dst writes its columns in reverse): the same bytes as Resize then FlipHorizontal.
// Bilinear (a triangle filter, pixel centres aligned) when enlarging or shrinking up to 2x; when
// shrinking more, the triangle widens with the scale so every source pixel contributes (area
// averaging, Pillow's BILINEAR), which avoids the aliasing of plain bilinear. Identical sizes copy
// exactly; a constant image stays constant; outputs are within one level of the exact filter.
// Writes only the dst_width * 3 bytes of each dst row. Separable, fixed-point weights, with
// AVX2/AVX-512 kernels where the CPU has them, bit-identical to the portable ones.
// Thread-safe: it runs a thread_local Resizer (so each calling thread keeps that Resizer's scratch
// and last filters for its lifetime).
void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
            bool flip_horizontal = false);

// Resize with a choice of filter and both mirrors; options.flip_vertical writes the result's rows
// bottom-up, at no extra cost: the same bytes as Resize then a flip of the rows.
// kBilinear is the recipe above, byte for byte (the bool overload is this one with
// {kBilinear, flip_horizontal, false}). kArea and kBicubic run a float path that keeps the
// references' arithmetic: each axis filtered as Pillow and torchvision's antialiased resize do
// (kArea: Pillow's BOX, a box of half-width 0.5 stretched by the scale when shrinking, nearest
// neighbour when enlarging; kBicubic: Keys' cubic, a = -0.5, half-width 2 * max(scale, 1), as
// torchvision's bicubic with antialias=True), the intermediate kept in float (bicubic's
// overshoot unclamped), then clamped to 0..255 and rounded to nearest, ties to even. Its bytes do
// not depend on Resizer::Kernels or the CPU. Identical sizes copy exactly (mirrored as asked) for
// every filter.
// REQUIRES: options.filter is one of ResizeFilter's enumerators.
void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
            const ResizeOptions& options);

// Resize with its scratch memory and the filters of the last sizes held in the object: a worker
// that resizes a stream of images allocates nothing once warm, and rebuilds an axis's filter
// (~1-2 us) only when that axis's (source, destination) size changes. Not thread-safe; use one
// per thread.
class Resizer {
 public:
  // Which kernels run: kBest the widest the CPU has (AVX-512 for the vertical pass, AVX2), kAvx2
  // at most AVX2, kPortable plain C++. All give identical bytes (the tests check it).
  enum class Kernels { kBest, kAvx2, kPortable };

  explicit Resizer(Kernels kernels = Kernels::kBest);
  ~Resizer();
  // A moved-from Resizer may only be destroyed or assigned to.
  Resizer(Resizer&&) noexcept;
  Resizer& operator=(Resizer&&) noexcept;
  Resizer(const Resizer&) = delete;
  Resizer& operator=(const Resizer&) = delete;

  // As the free function Resize. Scratch grows to the largest request seen: four source rows
  // and, when it is cheaper to filter horizontally first (enlarging), every source row a vertical
  // window reaches, filtered to dst_width pixels.
  void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
              bool flip_horizontal = false);
  // As the free function Resize with options. The float path (kArea, kBicubic) keeps its own
  // filters and scratch: four source-wide rows of floats and a tile of 64 bytes per source pixel.
  void Resize(const ImageView& src, uint8_t* dst, int dst_width, int dst_height, size_t dst_stride,
              const ResizeOptions& options);

  // The kernels in use: "avx512", "avx2" or "portable" (what the CPU and Kernels allowed).
  std::string_view kernels_name() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Mirrors an RGB image left-right in place.
void FlipHorizontal(uint8_t* data, int width, int height, size_t stride);

// Converts gray (1 byte per pixel) to RGB.
void GrayToRgb(const uint8_t* gray, size_t n_pixels, uint8_t* rgb);

// Converts CMYK to RGB. inverted: Adobe writes CMYK JPEGs with inverted values (255 = no ink),
// which is what libjpeg hands back for them.
void CmykToRgb(const uint8_t* cmyk, size_t n_pixels, bool inverted, uint8_t* rgb);

}  // namespace sluice

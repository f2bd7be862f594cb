// The row kernels of Resizer (internal to formats/): the portable ones, and the x86 SIMD ones that
// give the very same bytes faster. Resizer calls them through these pointers, once per row (or
// step of kRowsPerStep rows), so nothing hot crosses a file: each kernel's inner loops and the
// helpers they inline live together in one file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/resize_filter.h"

namespace sluice::resize_internal {

// out[j] for j < n = sum over k < taps of w[k] * rows[k][j], as resize_filter.h describes.
using VerticalKernel = void (*)(const uint8_t* const* rows, const uint16_t* w, int taps, size_t n,
                                uint8_t* out);
// Filters rows in[0..kRowsPerStep) (each readable f.overread() bytes past its end) into
// out[0..kRowsPerStep), f.out_size pixels each, mirrored when flip is set. Callers with fewer rows
// repeat an input and aim the spare outputs at a junk row. scratch: the kernel's, kept by the
// caller between calls.
using HorizontalKernel = void (*)(const uint8_t* const* in, uint8_t* const* out,
                                  const HorizontalFilter& f, bool flip,
                                  std::vector<uint8_t>* scratch);

// Plain C++, written so the compiler vectorizes them (resize_kernels_portable.cc).
void VerticalPortable(const uint8_t* const* rows, const uint16_t* w, int taps, size_t n,
                      uint8_t* out);
void HorizontalPortable(const uint8_t* const* in, uint8_t* const* out, const HorizontalFilter& f,
                        bool flip, std::vector<uint8_t>* tile_storage);

// The float path's kernels. out[j] for j < n = sum over k < taps of w[k] * rows[k][j].
// REQUIRES: taps >= 1 (and every count of the horizontal kernel's filter).
using VerticalFloatKernel = void (*)(const uint8_t* const* rows, const float* w, int taps, size_t n,
                                     float* out);
// Filters the float rows in[0..kRowsPerStep) (f.in_size RGB pixels each) into
// out[0..kRowsPerStep), f.out_size pixels each, mirrored when flip; each sample clamped to
// 0..255 and rounded to the nearest byte, ties to even (torch.round's rule). Callers with fewer
// rows repeat an input and aim the spare outputs at a junk row. tile: the kernel's scratch, kept
// by the caller between calls.
using HorizontalFloatKernel = void (*)(const float* const* in, uint8_t* const* out,
                                       const FloatFilter& f, bool flip, std::vector<float>* tile);
// Compiled for the baseline ISA and, in resize_kernels_x86.cc, for AVX2, from the one source of
// resize_float_kernels.h: identical bytes either way.
void VerticalFloat(const uint8_t* const* rows, const float* w, int taps, size_t n, float* out);
void HorizontalFloat(const float* const* in, uint8_t* const* out, const FloatFilter& f, bool flip,
                     std::vector<float>* tile);

// The x86 kernels (resize_kernels_x86.cc): null where the build or this CPU lacks AVX2 (for the
// 512-bit one, AVX-512F and BW).
VerticalKernel VerticalAvx2Kernel();
VerticalKernel VerticalAvx512Kernel();
// The AVX2 horizontal kernel specialised for a filter of `pairs` pairs; null without AVX2.
HorizontalKernel HorizontalAvx2Kernel(int pairs);
// The float kernels compiled for AVX2; null without it.
VerticalFloatKernel VerticalFloatAvx2Kernel();
HorizontalFloatKernel HorizontalFloatAvx2Kernel();

}  // namespace sluice::resize_internal

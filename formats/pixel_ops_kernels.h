// The kernel choice behind pixel_ops.h's SIMD ops (internal to formats/ and its tests): the public
// functions run the widest kernels this CPU has; these entry points also run the portable ones,
// which give the very same bytes, so a test can compare the two on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/pixel_ops.h"

namespace sluice::pixel_internal {

// kBest: AVX2 (with F16C for float16) where the build and the CPU have them; kPortable: plain C++.
enum class Kernels { kBest, kPortable };

// Whether kBest differs from kPortable on this machine.
bool HaveSimdKernels();

void AdjustContrast(MutableImageView img, double factor, Kernels kernels);
void AdjustSaturation(MutableImageView img, double factor, Kernels kernels);
void ToGrayscale(MutableImageView img, Kernels kernels);
void AdjustHue(MutableImageView img, double hue_factor, Kernels kernels);
void WriteOutput(const ImageView& img, const OutputSpec& spec, void* dst, Kernels kernels);
void JitterAndWrite(MutableImageView img, const JitterStep* steps, int n, const OutputSpec& spec,
                    void* dst, Kernels kernels);
void AdjustBrightness(MutableImageView img, double factor, Kernels kernels);
void GaussianBlur(MutableImageView img, int kernel_size, double sigma, std::vector<float>* scratch,
                  Kernels kernels);

// n floats to float16: F16C's VCVTPS2PH (round to nearest even) under kBest, FloatToHalf's
// portable arithmetic under kPortable.
void FloatsToHalf(const float* in, size_t n, uint16_t* out, Kernels kernels);

}  // namespace sluice::pixel_internal

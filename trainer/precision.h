// The number format a backend feeds its GEMMs ("precision"), and the rounding that emulates it on
// the CPU. In every precision the residual stream, LayerNorm statistics, logits, gradients and
// the optimizer state stay fp32; only the tensors a GEMM reads (weights, activations, the
// activation gradients of the backward pass) are stored in the narrow format.
//
// The CUDA backend stores those tensors in bf16 or fp16; the CPU backend, asked for the same
// precision, rounds them at the same points (round to nearest even, fp16 overflowing to ±inf as
// on the device), so a run on the CPU sees the narrow format's errors and overflows.
//
// C++17 (the CUDA sources include it).
#pragma once

#include <cstdint>
#include <string>

#include "formats/status.h"

namespace sluice::trainer {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32", "bf16", "fp16".
const char* PrecisionName(Precision p);
// InvalidArgument naming the value unless it is one of the names above.
Result<Precision> ParsePrecision(const std::string& name);

// x rounded to the nearest value of `p` (ties to even); NaN stays NaN, fp16 overflows to ±inf
// and underflows through its subnormals to ±0. kFp32: x unchanged.
float RoundToPrecision(float x, Precision p);
// Every value of values[0, count) rounded in place (parallel for large arrays).
void RoundInPlace(float* values, int64_t count, Precision p);
// Bytes of one value stored in `p`.
inline int ElementSize(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

}  // namespace sluice::trainer

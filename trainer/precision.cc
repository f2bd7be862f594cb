#include "trainer/precision.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <bit>
#include <cmath>

namespace sluice::trainer {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& name) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    if (name == PrecisionName(p)) return p;
  }
  return InvalidArgument("precision '" + name + "': expected fp32, bf16 or fp16");
}

float RoundToPrecision(float x, Precision p) {
  switch (p) {
    case Precision::kFp32:
      return x;
    case Precision::kBf16: {
      if (std::isnan(x)) return x;
      // Keep the top 16 bits, rounding the dropped 16 to nearest, ties to even.
      uint32_t bits = std::bit_cast<uint32_t>(x);
      bits += 0x7fffu + ((bits >> 16) & 1u);
      return std::bit_cast<float>(bits & 0xffff0000u);
    }
    case Precision::kFp16:
      // GCC's _Float16 conversion rounds to nearest even, with IEEE overflow and subnormals.
      return static_cast<float>(static_cast<_Float16>(x));
  }
  return x;
}

void RoundInPlace(float* values, int64_t count, Precision p) {
  if (p == Precision::kFp32) return;
  constexpr int64_t kGrain = 1 << 14;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, count, kGrain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i != r.end(); ++i)
                        values[i] = RoundToPrecision(values[i], p);
                    });
}

}  // namespace sluice::trainer

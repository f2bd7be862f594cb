// Rounding to the narrow formats (the CPU's emulation of the GPU's storage) and the dynamic loss
// scale's update rule, which the CPU trainer and the CUDA step kernel share.
#include "trainer/precision.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "trainer/loss_scale.h"

namespace sluice::trainer {
namespace {

TEST_CASE("Bf16RoundsToNearestEvenAndOverflowsToInfinity") {
  const Precision p = Precision::kBf16;
  CHECK(RoundToPrecision(1.0f, p) == 1.0f);
  // bf16 keeps 8 significant bits: 1 + 2^-7 is exact, 1 + 2^-8 is a tie that goes to even (1).
  CHECK(RoundToPrecision(1.0f + 0x1p-7f, p) == 1.0f + 0x1p-7f);
  CHECK(RoundToPrecision(1.0f + 0x1p-8f, p) == 1.0f);
  CHECK(RoundToPrecision(1.0f + 0x1p-7f + 0x1p-8f, p) == 1.0f + 0x1p-6f);  // tie, up to even
  CHECK(RoundToPrecision(1.0f + 0x1p-8f + 0x1p-12f, p) == 1.0f + 0x1p-7f);  // past the tie
  CHECK(RoundToPrecision(-3.0f, p) == -3.0f);
  CHECK(std::isinf(RoundToPrecision(std::numeric_limits<float>::max(), p)));
  CHECK(std::isnan(RoundToPrecision(std::numeric_limits<float>::quiet_NaN(), p)));
  CHECK(RoundToPrecision(1e30f, p) == Approx(1e30f).epsilon(1.0 / 256));
}

TEST_CASE("Fp16OverflowsPast65504AndKeepsSubnormals") {
  const Precision p = Precision::kFp16;
  CHECK(RoundToPrecision(65504.0f, p) == 65504.0f);
  CHECK(RoundToPrecision(65519.0f, p) == 65504.0f);
  CHECK(std::isinf(RoundToPrecision(65520.0f, p)));  // the tie rounds to "even": infinity
  CHECK(std::isinf(RoundToPrecision(-1e6f, p)));
  CHECK(RoundToPrecision(-1e6f, p) < 0);
  CHECK(RoundToPrecision(0x1p-24f, p) == 0x1p-24f);  // the smallest subnormal
  CHECK(RoundToPrecision(0x1p-26f, p) == 0.0f);      // below half of it
  CHECK(RoundToPrecision(0.1f, p) == Approx(0.0999755859375f));
  CHECK(RoundToPrecision(1.0f + 0x1p-11f, p) == 1.0f);  // 11 significant bits, tie to even
}

TEST_CASE("Fp32IsLeftAloneAndNamesParse") {
  CHECK(RoundToPrecision(0.1f, Precision::kFp32) == 0.1f);
  float values[3] = {0.1f, 70000.0f, 1.0f + 0x1p-11f};
  RoundInPlace(values, 3, Precision::kFp16);
  CHECK(values[0] == RoundToPrecision(0.1f, Precision::kFp16));
  CHECK(std::isinf(values[1]));
  CHECK(values[2] == 1.0f);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    CHECK(ParsePrecision(PrecisionName(p)).value() == p);
  }
  const Status bad = ParsePrecision("fp8").status();
  CHECK(bad.code() == StatusCode::kInvalidArgument);
  CHECK(bad.message().find("fp8") != std::string::npos);
  CHECK(ElementSize(Precision::kFp32) == 4);
  CHECK(ElementSize(Precision::kBf16) == 2);
}

TEST_CASE("LossScaleBacksOffOnOverflowAndGrowsAfterACleanInterval") {
  LossScaleOptions o;
  o.initial = 1024;
  o.growth_interval = 3;
  LossScaleState s{o.initial, 0};
  CHECK_FALSE(UpdateLossScale(&s, /*finite=*/false, o));
  CHECK(s.scale == 512);
  CHECK(s.good_steps == 0);
  CHECK(UpdateLossScale(&s, true, o));
  CHECK(UpdateLossScale(&s, true, o));
  CHECK(s.scale == 512);
  CHECK(s.good_steps == 2);
  CHECK(UpdateLossScale(&s, true, o));  // the third clean step in a row
  CHECK(s.scale == 1024);
  CHECK(s.good_steps == 0);
  CHECK(UpdateLossScale(&s, true, o));
  CHECK_FALSE(UpdateLossScale(&s, false, o));  // an overflow resets the count
  CHECK(s.scale == 512);
  CHECK(s.good_steps == 0);
}

TEST_CASE("LossScaleStaysWithinItsBounds") {
  LossScaleOptions o;
  o.growth_interval = 1;
  o.min_scale = 1;
  o.max_scale = 4;
  LossScaleState s{2, 0};
  UpdateLossScale(&s, true, o);
  UpdateLossScale(&s, true, o);
  UpdateLossScale(&s, true, o);
  CHECK(s.scale == 4);
  for (int i = 0; i < 5; ++i) UpdateLossScale(&s, false, o);
  CHECK(s.scale == 1);
}

TEST_CASE("Fp16HoldsMinusTheLargestLossScale") {
  // A confidently wrong sample's logit gradient is −1 × the scale: at the cap it must stay finite.
  const LossScaleOptions o;
  CHECK(std::isfinite(RoundToPrecision(-o.max_scale, Precision::kFp16)));
  CHECK(RoundToPrecision(-o.max_scale, Precision::kFp16) == -o.max_scale);  // exact: a power of 2
  CHECK(o.initial <= o.max_scale);
  // Growing from the cap stays at the cap.
  LossScaleOptions fast = o;
  fast.growth_interval = 1;
  LossScaleState s{o.max_scale, 0};
  CHECK(UpdateLossScale(&s, true, fast));
  CHECK(s.scale == o.max_scale);
}

}  // namespace
}  // namespace sluice::trainer

// Mixup and CutMix on batch buffers (pipeline/batch_mix.h): the Beta draws, each dtype's blend, and
// the box of CutMix in both layouts.
#include "pipeline/batch_mix.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "formats/pixel_ops.h"

namespace sluice {
namespace {

TEST_CASE("BetaDrawsLieInZeroOneWithMeanOneHalfEvenForTinyAlpha") {
  for (double alpha : {1e-6, 0.2, 1.0, 5.0}) {
    AugmentRng rng(7, 1);
    double sum = 0;
    const int n = 4000;
    for (int i = 0; i < n; ++i) {
      const double b = SampleBeta(alpha, rng);
      REQUIRE(b >= 0);
      REQUIRE(b <= 1);
      sum += b;
    }
    INFO(alpha);
    CHECK(sum / n == Approx(0.5).margin(0.05));
  }
}

TransformSpec MixupOnly() {
  TransformSpec spec;
  spec.mixup_alpha = 1;
  return spec;
}

TEST_CASE("MixupOfEveryDtypeIsLambdaOfItsOwnAndTheRestOfThePrevious") {
  for (DType dtype : {DType::kUint8, DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    INFO(DTypeName(dtype));
    BatchBuffer b(3, 2, 2, false, false, dtype, Layout::kNhwc, /*with_mix=*/true);
    const size_t values = 2 * 2 * 3;
    // Sample s holds the value 10 * (s + 1) everywhere.
    for (int s = 0; s < 3; ++s) {
      b.labels[s] = s;
      for (size_t k = 0; k < values; ++k) {
        const float v = 10.0f * (s + 1);
        uint8_t* p = b.image(s) + k * DTypeSize(dtype);
        if (dtype == DType::kUint8) *p = static_cast<uint8_t>(v);
        if (dtype == DType::kFloat32) std::memcpy(p, &v, 4);
        const uint16_t h = dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
        if (DTypeSize(dtype) == 2) std::memcpy(p, &h, 2);
      }
    }
    const TransformSpec spec = MixupOnly();
    BatchMixer mixer(spec, 42);
    mixer.Mix(&b, 3, 0, 0);
    const float lambda = b.label_weights[0];
    for (int s = 0; s < 3; ++s) {
      const int prev = (s + 2) % 3;
      CHECK(b.mixed_labels[s] == prev);
      CHECK(b.label_weights[s] == lambda);
      const float want = lambda * 10.0f * (s + 1) + (1 - lambda) * 10.0f * (prev + 1);
      const uint8_t* p = b.image(s);
      float got = 0;
      if (dtype == DType::kUint8) got = *p;
      if (dtype == DType::kFloat32) std::memcpy(&got, p, 4);
      uint16_t h;
      std::memcpy(&h, p, 2);
      if (dtype == DType::kFloat16) got = HalfToFloat(h);
      if (dtype == DType::kBFloat16) got = BFloat16ToFloat(h);
      CHECK(got == Approx(want).margin(dtype == DType::kUint8 ? 0.5 : want / 128));
    }
  }
}

TEST_CASE("CutmixPastesTheSameBoxInNhwcAndNchw") {
  TransformSpec spec;
  spec.cutmix_alpha = 1;
  BatchBuffer nhwc(2, 16, 16, false, false, DType::kUint8, Layout::kNhwc, true);
  BatchBuffer nchw(2, 16, 16, false, false, DType::kUint8, Layout::kNchw, true);
  for (int s = 0; s < 2; ++s) {
    std::memset(nhwc.image(s), s + 1, nhwc.image_bytes);
    std::memset(nchw.image(s), s + 1, nchw.image_bytes);
  }
  BatchMixer a(spec, 3), b(spec, 3);
  a.Mix(&nhwc, 2, 0, 5);
  b.Mix(&nchw, 2, 0, 5);
  CHECK(nhwc.label_weights[0] == nchw.label_weights[0]);
  // Sample 1's pixels from sample 0 (value 1): the box, in channel 0 of each layout.
  int box_nhwc = 0, box_nchw = 0;
  for (int p = 0; p < 16 * 16; ++p) {
    box_nhwc += nhwc.image(1)[p * 3] == 1;
    box_nchw += nchw.image(1)[p] == 1;
  }
  CHECK(box_nhwc == box_nchw);
  CHECK(nhwc.label_weights[1] == Approx(1.0 - box_nhwc / 256.0));
}

}  // namespace
}  // namespace sluice

// The policy engine (pipeline/auto_augment.h): torchvision's spaces and draws from our seed;
// tests/python/test_torchvision_policy.py compares every op and every bin with torchvision's.
#include "pipeline/auto_augment.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "formats/image_ops.h"

namespace sluice {
namespace {

constexpr int kBins = 31;
constexpr AutoAugmentPolicy kWide = AutoAugmentPolicy::kTrivialAugmentWide;
constexpr AutoAugmentPolicy kRand = AutoAugmentPolicy::kRandAugment;

std::vector<AutoAugmentOp> Sample(AutoAugmentPolicy policy, int num_ops, int magnitude,
                                  uint64_t stream) {
  AugmentRng rng(42, stream);
  return SampleAutoAugment(policy, num_ops, magnitude, kBins, 224, 160, rng);
}

bool Same(const std::vector<AutoAugmentOp>& a, const std::vector<AutoAugmentOp>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].magnitude != b[i].magnitude) return false;
  }
  return true;
}

TEST_CASE("OpNamesAreTorchvisionsAndRoundTrip") {
  CHECK(AutoAugmentOpName(AutoAugmentOpKind::kShearX) == "ShearX");
  CHECK(AutoAugmentOpName(AutoAugmentOpKind::kColor) == "Color");
  CHECK(AutoAugmentOpName(AutoAugmentOpKind::kAutoContrast) == "AutoContrast");
  for (int k = 0; k < kNumAutoAugmentOps; ++k) {
    const auto kind = static_cast<AutoAugmentOpKind>(k);
    REQUIRE(AutoAugmentOpFromName(AutoAugmentOpName(kind)) == kind);
  }
  CHECK(!AutoAugmentOpFromName("shearx").has_value());
  CHECK(!AutoAugmentOpFromName("Invert").has_value());  // AutoAugment's, not these policies'
}

TEST_CASE("MagnitudeBinsAreTorchvisionsSpaces") {
  using K = AutoAugmentOpKind;
  CHECK(AutoAugmentMagnitudes(kWide, K::kIdentity, kBins, 224, 160).empty());
  CHECK(AutoAugmentMagnitudes(kRand, K::kEqualize, kBins, 224, 160).empty());
  CHECK(AutoAugmentMagnitudes(kWide, K::kShearX, kBins, 224, 160).back() == 0.99f);
  CHECK(AutoAugmentMagnitudes(kRand, K::kShearY, kBins, 224, 160).back() == 0.3f);
  CHECK(AutoAugmentMagnitudes(kWide, K::kTranslateY, kBins, 224, 160).back() == 32.0f);
  // RandAugment translates by up to 150/331 of the image: x by the width, y by the height.
  CHECK(AutoAugmentMagnitudes(kRand, K::kTranslateX, kBins, 224, 160).back() ==
        static_cast<float>(150.0 / 331.0 * 224));
  CHECK(AutoAugmentMagnitudes(kRand, K::kTranslateY, kBins, 224, 160).back() ==
        static_cast<float>(150.0 / 331.0 * 160));
  CHECK(AutoAugmentMagnitudes(kWide, K::kRotate, kBins, 224, 160)[20] == 90.0f);
  CHECK(AutoAugmentMagnitudes(kRand, K::kRotate, kBins, 224, 160).back() == 30.0f);
  const auto solarize = AutoAugmentMagnitudes(kWide, K::kSolarize, kBins, 224, 160);
  CHECK(solarize.front() == 255.0f);
  CHECK(solarize.back() == 0.0f);
  // Posterize: 8 - round(bin / ((bins - 1) / 6)) bits for TA wide (8 down to 2), / 4 for
  // RandAugment (8 down to 4); round is half to even.
  const auto wide_bits = AutoAugmentMagnitudes(kWide, K::kPosterize, kBins, 224, 160);
  CHECK(wide_bits.front() == 8.0f);
  CHECK(wide_bits[13] == 5.0f);  // 13 / 5 = 2.6
  CHECK(wide_bits.back() == 2.0f);
  const auto rand_bits = AutoAugmentMagnitudes(kRand, K::kPosterize, kBins, 224, 160);
  CHECK(rand_bits[9] == 7.0f);  // 9 / 7.5 = 1.2
  CHECK(rand_bits.back() == 4.0f);
}

TEST_CASE("SamplingIsDeterministicForASeedAndStream") {
  for (uint64_t stream = 0; stream < 50; ++stream) {
    REQUIRE(Same(Sample(kWide, 0, 0, stream), Sample(kWide, 0, 0, stream)));
    REQUIRE(Same(Sample(kRand, 3, 9, stream), Sample(kRand, 3, 9, stream)));
  }
  int differing = 0;
  for (uint64_t stream = 0; stream < 50; ++stream) {
    differing += Same(Sample(kRand, 2, 9, stream), Sample(kRand, 2, 9, stream + 1000)) ? 0 : 1;
  }
  CHECK(differing > 40);
}

TEST_CASE("TrivialAugmentWideSamplingCoversEveryOpBinAndSign") {
  std::set<int> kinds;
  std::set<std::pair<int, float>> signed_bins;  // (kind, magnitude) of the signed ops
  for (uint64_t stream = 0; stream < 20000; ++stream) {
    const auto ops = Sample(kWide, 5, 9, stream);
    REQUIRE(ops.size() == 1);  // one op, whatever num_ops says
    kinds.insert(static_cast<int>(ops[0].kind));
    if (AutoAugmentOpIsSigned(ops[0].kind)) {
      signed_bins.insert({static_cast<int>(ops[0].kind), static_cast<float>(ops[0].magnitude)});
    } else {
      REQUIRE(ops[0].magnitude >= 0);
    }
  }
  CHECK(kinds.size() == kNumAutoAugmentOps);
  // 9 signed ops, each at 31 bins of both signs but bin 0 (+0 and -0 compare equal).
  CHECK(signed_bins.size() == 9u * (2 * kBins - 1));
}

TEST_CASE("RandAugmentUsesTheGivenBinForEveryOp") {
  std::set<int> kinds;
  bool negative = false;
  for (uint64_t stream = 0; stream < 2000; ++stream) {
    const auto ops = Sample(kRand, 2, 9, stream);
    REQUIRE(ops.size() == 2);
    for (const AutoAugmentOp& op : ops) {
      kinds.insert(static_cast<int>(op.kind));
      const auto bins = AutoAugmentMagnitudes(kRand, op.kind, kBins, 224, 160);
      REQUIRE(std::abs(op.magnitude) == (bins.empty() ? 0.0 : static_cast<double>(bins[9])));
      negative = negative || op.magnitude < 0;
    }
  }
  CHECK(kinds.size() == kNumAutoAugmentOps);
  CHECK(negative);
  CHECK(Sample(kRand, 0, 9, 1).empty());
}

TEST_CASE("IdentityAutoContrastOfAConstantAndZeroTranslationLeaveTheImage") {
  Image img;
  img.Resize(10, 7);
  std::mt19937 rng(1);
  for (auto& v : img.pixels) v = static_cast<uint8_t>(rng());
  const Image before = img;
  std::vector<uint8_t> scratch;
  MutableImageView view{img.pixels.data(), img.width, img.height, 30};
  ApplyAutoAugmentOp({AutoAugmentOpKind::kIdentity, 0}, view, &scratch);
  ApplyAutoAugmentOp({AutoAugmentOpKind::kTranslateX, 0.7}, view, &scratch);  // int(0.7) = 0
  ApplyAutoAugmentOp({AutoAugmentOpKind::kTranslateY, -0.7}, view, &scratch);
  ApplyAutoAugmentOp({AutoAugmentOpKind::kShearX, 0}, view, &scratch);
  ApplyAutoAugmentOp({AutoAugmentOpKind::kRotate, 0}, view, &scratch);
  ApplyAutoAugmentOp({AutoAugmentOpKind::kSharpness, 0}, view, &scratch);  // factor 1
  CHECK(img.pixels == before.pixels);
}

TEST_CASE("TranslationTruncatesTheMagnitudeTowardZero") {
  Image a;
  a.Resize(9, 5);
  std::mt19937 rng(2);
  for (auto& v : a.pixels) v = static_cast<uint8_t>(rng());
  Image b = a;
  std::vector<uint8_t> scratch;
  ApplyAutoAugmentOp({AutoAugmentOpKind::kTranslateX, -2.9},
                     MutableImageView{a.pixels.data(), 9, 5, 27}, &scratch);
  ApplyAutoAugmentOp({AutoAugmentOpKind::kTranslateX, -2.0},
                     MutableImageView{b.pixels.data(), 9, 5, 27}, &scratch);
  CHECK(a.pixels == b.pixels);
  // Moved left by 2: the last two columns are fill.
  for (int y = 0; y < 5; ++y) {
    CHECK(a.pixels[y * 27 + 8 * 3] == 0);
    CHECK(a.pixels[y * 27 + 7 * 3 + 1] == 0);
  }
}

}  // namespace
}  // namespace sluice

#include "formats/seed.h"

namespace sluice {
namespace {

// SplitMix64 (Steele, Lea and Flood 2014): a Weyl sequence through a strong 64-bit finaliser. Its
// state is a plain counter, so a generator is two words of set-up and no table, and seeding from
// (seed, stream) through the same finaliser gives unrelated sequences for neighbouring streams.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t MixSeed(uint64_t seed, uint64_t salt) { return Mix(seed ^ Mix(salt + kGolden)); }

AugmentRng::AugmentRng(uint64_t seed, uint64_t stream)
    : state_(MixSeed(seed, stream)) {}

uint64_t AugmentRng::NextU64() {
  state_ += kGolden;
  return Mix(state_);
}

double AugmentRng::NextDouble() {
  // The top 53 bits fill a double's mantissa exactly: every value is a multiple of 2^-53 below 1.
  return static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
}

}  // namespace sluice

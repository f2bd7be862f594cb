// Seeds and counter-based random numbers: every seeded choice in Sluice (file order, shuffle,
// split, per-image augmentation) draws from here, so the same seed gives the same stream on any
// thread and any machine.
#pragma once

#include <cstdint>

namespace sluice {

// Derives an independent 64-bit seed from (seed, salt) with the SplitMix64 finaliser: how every
// seeded choice (file order, shuffle, split, per-image randomness) gets its own stream.
uint64_t MixSeed(uint64_t seed, uint64_t salt);

// A counter-based generator: the same (seed, stream) gives the same numbers on any thread, so
// augmentation depends on a record's position, not on which worker ran it.
class AugmentRng {
 public:
  AugmentRng(uint64_t seed, uint64_t stream);
  uint64_t NextU64();
  double NextDouble();  // [0, 1)

 private:
  uint64_t state_;
};

}  // namespace sluice

// Mixup and CutMix (TransformSpec::mixup_alpha, cutmix_alpha), applied by the batcher to each
// finished batch as torchvision.transforms.v2's MixUp and CutMix: lambda ~ Beta(alpha, alpha) per
// batch, sample i mixed with sample i - 1 (the batch rolled by one; sample 0 with the last), its
// label kept with weight lambda (CutMix: 1 - the pasted box's share of the image) and the other's
// in mixed_labels. With both, each batch gets one, with equal odds. The draws come from (seed,
// epoch, batch index), so batches are the same at any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/seed.h"
#include "pipeline/batch.h"
#include "pipeline/transform_spec.h"

namespace sluice {

// A draw from Beta(alpha, alpha) (two Gamma(alpha) draws, Marsaglia and Tsang). REQUIRES: alpha >
// 0.
double SampleBeta(double alpha, AugmentRng& rng);

class BatchMixer {
 public:
  explicit BatchMixer(const TransformSpec& spec, uint64_t seed) : spec_(spec), seed_(seed) {}

  // Mixes the first `size` samples of buffer in place and fills its mixed_labels and
  // label_weights. REQUIRES: spec.mixes_labels(); buffer made with_mix.
  void Mix(BatchBuffer* buffer, int size, int64_t epoch, int64_t index);

 private:
  const TransformSpec& spec_;
  const uint64_t seed_;
  std::vector<uint8_t> last_;  // the batch's last image before mixing (sample 0's partner)
};

}  // namespace sluice

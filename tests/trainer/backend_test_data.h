// Inputs for the backend tests (CPU and CUDA): random batches and parameters away from init.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "trainer/model.h"

namespace sluice::testing {

struct TestBatch {
  std::vector<uint8_t> images;  // n × S × S × 3
  std::vector<int32_t> labels;  // n, in [0, classes)
};

inline TestBatch MakeBatch(const trainer::ModelConfig& c, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  TestBatch b;
  b.images.resize(size_t(n) * c.image_size * c.image_size * 3);
  for (uint8_t& v : b.images) v = static_cast<uint8_t>(rng() % 256);
  for (int i = 0; i < n; ++i) b.labels.push_back(static_cast<int32_t>(rng() % c.classes));
  return b;
}

// Parameters away from their init (non-zero biases, gains ≠ 1, a head large enough to matter) so
// that every tensor's gradient is non-trivial.
inline std::vector<float> RandomParameters(const trainer::ParameterLayout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(layout.total());
  for (const trainer::ParameterTensor& t : layout.tensors()) {
    const bool gain = t.name.find("gain") != std::string::npos;
    const float scale = t.rows > 1 ? 1.0f / std::sqrt(static_cast<float>(t.cols)) : 0.3f;
    for (int64_t i = 0; i < t.size; ++i) {
      p[t.offset + i] = (gain ? 1.0f : 0.0f) + scale * normal(rng);
    }
  }
  return p;
}

// ‖a - b‖ / ‖b‖ over elements [offset, offset + count) (count -1: to the end).
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b,
                            int64_t offset = 0, int64_t count = -1) {
  const int64_t end = count < 0 ? static_cast<int64_t>(b.size()) : offset + count;
  double diff = 0, norm = 0;
  for (int64_t i = offset; i < end; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(1e-12, std::sqrt(norm));
}

// The same over one parameter tensor.
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b,
                            const trainer::ParameterTensor& t) {
  return RelativeError(a, b, t.offset, t.size);
}

}  // namespace sluice::testing

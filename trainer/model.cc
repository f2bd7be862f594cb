#include "trainer/model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "trainer/model_constants.h"

namespace sluice::trainer {
namespace {

constexpr float kHeadStd = 0.02f;

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal truncated to [-2, 2] (by rejection).
  double TruncatedNormal() {
    for (;;) {
      const double z = std::sqrt(-2.0 * std::log(Uniform())) * std::cos(2.0 * M_PI * Uniform());
      if (std::fabs(z) <= 2.0) return z;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace

Status ModelConfig::Validate() const {
  if (patch < 1 || patch > 64)
    return InvalidArgument("patch " + std::to_string(patch) + " is not in [1, 64]");
  if (image_size < patch || image_size % patch != 0) {
    return InvalidArgument("image size " + std::to_string(image_size) +
                           " is not a positive multiple of the patch size " +
                           std::to_string(patch));
  }
  if (image_size > kMaxImageSize) {
    return InvalidArgument("image size " + std::to_string(image_size) + " is over " +
                           std::to_string(kMaxImageSize));
  }
  if (tokens() > kMaxTokens) {
    return InvalidArgument("image size " + std::to_string(image_size) + " with patch " +
                           std::to_string(patch) + " gives " + std::to_string(tokens()) +
                           " tokens, over " + std::to_string(kMaxTokens));
  }
  if (width < 1 || width > 8192)
    return InvalidArgument("width " + std::to_string(width) + " is not in [1, 8192]");
  if (depth < 0 || depth > 64)
    return InvalidArgument("depth " + std::to_string(depth) + " is not in [0, 64]");
  if (classes < 2 || classes > 100000) {
    return InvalidArgument("num_classes " + std::to_string(classes) + " is not in [2, 100000]");
  }
  return Status::OK();
}

Status ModelConfig::ValidateBatch(int64_t batch) const {
  if (batch < 1 || batch * tokens() > std::numeric_limits<int>::max()) {
    return InvalidArgument("batch size " + std::to_string(batch) + " × " +
                           std::to_string(tokens()) + " tokens is not in [1, 2^31) rows");
  }
  return Status::OK();
}

ParameterLayout::ParameterLayout(const ModelConfig& config) {
  const int d = config.width, f = config.hidden();
  embed_weight = Add("embed.weight", d, config.patch_dim(), true);
  embed_bias = Add("embed.bias", 1, d, false);
  for (int l = 0; l < config.depth; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    Block b;
    b.ln_gain = Add(p + "ln.gain", 1, d, false);
    b.ln_bias = Add(p + "ln.bias", 1, d, false);
    b.fc1_weight = Add(p + "fc1.weight", f, d, true);
    b.fc1_bias = Add(p + "fc1.bias", 1, f, false);
    b.fc2_weight = Add(p + "fc2.weight", d, f, true);
    b.fc2_bias = Add(p + "fc2.bias", 1, d, false);
    blocks.push_back(b);
  }
  final_ln_gain = Add("final_ln.gain", 1, d, false);
  final_ln_bias = Add("final_ln.bias", 1, d, false);
  head_weight = Add("head.weight", config.classes, d, true);
  head_bias = Add("head.bias", 1, config.classes, false);
}

int ParameterLayout::Add(std::string name, int rows, int cols, bool weight_decay) {
  ParameterTensor t;
  t.name = std::move(name);
  t.offset = (total_ + kAlignment - 1) / kAlignment * kAlignment;
  t.rows = rows;
  t.cols = cols;
  t.size = int64_t{rows} * cols;
  t.weight_decay = weight_decay;
  total_ = t.offset + t.size;
  parameters_ += t.size;
  tensors_.push_back(std::move(t));
  return static_cast<int>(tensors_.size()) - 1;
}

std::vector<float> ParameterLayout::Pack(std::span<const float> flat) const {
  std::vector<float> packed;
  packed.reserve(parameters_);
  for (const ParameterTensor& t : tensors_) {
    packed.insert(packed.end(), flat.begin() + t.offset, flat.begin() + t.offset + t.size);
  }
  return packed;
}

std::vector<float> ParameterLayout::Unpack(std::span<const float> packed) const {
  std::vector<float> flat(total_, 0.0f);
  int64_t at = 0;
  for (const ParameterTensor& t : tensors_) {
    std::copy(packed.begin() + at, packed.begin() + at + t.size, flat.begin() + t.offset);
    at += t.size;
  }
  return flat;
}

std::vector<float> InitParameters(const ModelConfig& config, const ParameterLayout& layout,
                                  uint64_t seed) {
  std::vector<float> params(layout.total(), 0.0f);
  SplitMix64 rng(seed);
  auto fill_normal = [&](int index, double stddev) {
    const ParameterTensor& t = layout.tensors()[index];
    for (int64_t i = 0; i < t.size; ++i)
      params[t.offset + i] = static_cast<float>(stddev * rng.TruncatedNormal());
  };
  auto fill_ones = [&](int index) {
    const ParameterTensor& t = layout.tensors()[index];
    for (int64_t i = 0; i < t.size; ++i) params[t.offset + i] = 1.0f;
  };
  fill_normal(layout.embed_weight, 1.0 / std::sqrt(config.patch_dim()));
  const double residual_scale = 1.0 / std::sqrt(2.0 * std::max(1, config.depth));
  for (const ParameterLayout::Block& b : layout.blocks) {
    fill_ones(b.ln_gain);
    fill_normal(b.fc1_weight, 1.0 / std::sqrt(config.width));
    fill_normal(b.fc2_weight, residual_scale / std::sqrt(config.hidden()));
  }
  fill_ones(layout.final_ln_gain);
  fill_normal(layout.head_weight, kHeadStd);
  return params;
}

InputNormalization::InputNormalization() {
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v)
      table[c][v] = (static_cast<float>(v) / 255.0f - kImageNetMean[c]) / kImageNetStd[c];
  }
}

}  // namespace sluice::trainer

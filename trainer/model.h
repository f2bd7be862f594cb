// The trainer's model, independent of the backend that runs it: a patch-embedding MLP classifier.
//
//   uint8 NHWC image ──normalize (ImageNet mean/std)──▶ patches P×P×3 (T = (S/P)² tokens)
//   ──linear──▶ width D ──L × [ x + W2·GELU(W1·LN(x) + b1) + b2 ]──▶ mean over tokens ──LN──▶
//   ──linear──▶ logits (classes)
//
// The MLP hidden width is 4·D (the transformer convention). Every parameter lives in one flat fp32
// array; ParameterLayout names the slices, so the optimizer, the checkpoint and a future fused
// multi-tensor kernel all walk the same buffer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/status.h"

namespace sluice::trainer {

struct ModelConfig {
  // Bounds Validate() enforces: the backends index rows (batch × tokens) and image bytes with int
  // and int64 arithmetic; 4096² images of 16² patches are far past any model trained here.
  static constexpr int kMaxImageSize = 4096;
  static constexpr int kMaxTokens = 65536;

  int image_size = 32;  // S: images are S×S×3
  int patch = 8;        // P: S must be a multiple of P
  int width = 64;       // D
  int depth = 2;        // L residual MLP blocks
  int classes = 10;

  int hidden() const { return 4 * width; }
  int tokens() const { return (image_size / patch) * (image_size / patch); }
  int patch_dim() const { return patch * patch * 3; }
  // InvalidArgument naming the field when a size is out of range.
  Status Validate() const;
  // InvalidArgument unless 1 <= batch and batch × tokens() rows fit an int (the backends' rows).
  // REQUIRES: Validate() is OK.
  Status ValidateBatch(int64_t batch) const;

  bool operator==(const ModelConfig&) const = default;
};

struct ParameterTensor {
  std::string name;  // "block1.fc2.weight"
  int64_t offset = 0;
  int64_t size = 0;
  int rows = 0, cols = 0;     // weights are [out, in]; vectors have rows = 1
  bool weight_decay = false;  // linear weights only: not biases, not LayerNorm gains/shifts
};

// Where each tensor sits in the flat array, in a fixed order (embed, blocks, final LN, head).
// Every offset is a multiple of kAlignment elements: cuBLASLt's fast kernels and fused epilogues
// want 16-byte aligned operands, and the GEMMs read slices of the array (of its bf16/fp16 copy
// too). The padding between tensors is zero and no tensor's; optimizers and kernels may walk it.
class ParameterLayout {
 public:
  static constexpr int64_t kAlignment = 8;  // elements: 16 bytes of bf16/fp16, 32 of fp32

  explicit ParameterLayout(const ModelConfig& config);

  // Elements of the flat array, padding included.
  int64_t total() const { return total_; }
  // Elements of the tensors, padding excluded: the model's parameter count.
  int64_t parameters() const { return parameters_; }
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }

  // The tensors' values one after another without the padding (what a checkpoint stores, so a
  // file's meaning does not depend on the padding). REQUIRES: flat.size() == total().
  std::vector<float> Pack(std::span<const float> flat) const;
  // The inverse, padding zero. REQUIRES: packed.size() == parameters().
  std::vector<float> Unpack(std::span<const float> packed) const;

  // Indices into tensors() of the named parts; see the .cc for the order.
  struct Block {
    int ln_gain, ln_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias;
  };
  int embed_weight = 0, embed_bias = 0, final_ln_gain = 0, final_ln_bias = 0, head_weight = 0,
      head_bias = 0;
  std::vector<Block> blocks;

 private:
  int Add(std::string name, int rows, int cols, bool weight_decay);

  std::vector<ParameterTensor> tensors_;
  int64_t total_ = 0;
  int64_t parameters_ = 0;
};

// Seeded, deterministic (the same on every platform: splitmix64 and Box–Muller, no <random>
// distributions): linear weights N(0, 1/fan_in) truncated at 2σ, the residual branch's fc2 further
// scaled by 1/√(2L) so the residual stream's variance stays near 1 with depth, the head N(0, 0.02²)
// so the first loss is close to ln(classes); biases 0, LayerNorm gains 1.
std::vector<float> InitParameters(const ModelConfig& config, const ParameterLayout& layout,
                                  uint64_t seed);

// uint8 → float lookup, value v of channel c → (v/255 - mean[c]) / std[c] (ImageNet statistics).
struct InputNormalization {
  InputNormalization();
  float table[3][256];
};

}  // namespace sluice::trainer

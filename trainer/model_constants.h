// Constants of the model (trainer/model.h) that both backends compute with, defined once so the
// CPU backend and the CUDA kernels cannot drift apart. C++17 (the CUDA sources include it).
#pragma once

namespace sluice::trainer {

// Input normalization: value v of channel c → (v/255 - mean[c]) / std[c] (ImageNet statistics).
inline constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

// LayerNorm's epsilon.
inline constexpr float kLayerNormEps = 1e-5f;

}  // namespace sluice::trainer

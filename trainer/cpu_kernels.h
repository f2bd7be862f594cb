// fp32 compute kernels of the trainer's CPU backend: GEMMs, LayerNorm, GELU, softmax cross-entropy.
// Pure functions over caller-owned arrays (row-major); parallel with oneTBB over output rows.
//
// Determinism: every output element is computed by one thread in a fixed order (reductions run
// over k ascending), so results are bitwise identical whatever the thread count or scheduling.
// That is what lets a resumed run reproduce an uninterrupted one exactly.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::trainer {

// C[m×n] (+)= A[m×k] · B[k×n]. accumulate: add to C instead of overwriting it.
void GemmNN(const float* a, const float* b, float* c, int m, int n, int k, bool accumulate);
// C[m×n] (+)= A[m×k] · B[n×k]ᵀ (B is a weight stored [out, in]). transposed_b_scratch holds k×n.
void GemmNT(const float* a, const float* b, float* c, int m, int n, int k, bool accumulate,
            float* transposed_b_scratch);
// C[m×n] (+)= A[k×m]ᵀ · B[k×n] (weight gradients: dW = dYᵀ · X).
void GemmTN(const float* a, const float* b, float* c, int m, int n, int k, bool accumulate);

// y[r, :] += bias for every row r of y[rows×n].
void AddBias(float* y, const float* bias, int rows, int n);
// db[:] += Σ_r dy[r, :].
void BiasGrad(const float* dy, float* db, int rows, int n);

// LayerNorm over the last dimension (eps 1e-5): y = (x - mean) * rstd * gamma + beta. Writes the
// per-row mean and rstd for the backward pass.
void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int rows, int n);
// dx (+)= ∂L/∂x given dy; dgamma and dbeta are accumulated.
void LayerNormBackward(const float* x, const float* dy, const float* gamma, const float* mean,
                       const float* rstd, float* dx, float* dgamma, float* dbeta, int rows, int n,
                       bool accumulate_dx);

// GELU (tanh form, trainer/gelu.h), elementwise over `count` values.
void GeluForward(const float* x, float* y, int64_t count);
// dx = dy · GELU'(x).
void GeluBackward(const float* x, const float* dy, float* dx, int64_t count);

// Per sample r: loss_r = logsumexp(logits_r) - logits_r[label_r]; dlogits_r = softmax - onehot
// (the gradient of the SUM of the per-sample losses). Returns Σ loss_r; *correct counts argmax
// hits. REQUIRES: 0 <= labels[r] < classes.
double SoftmaxCrossEntropy(const float* logits, std::span<const int32_t> labels, int classes,
                           float* dlogits, int64_t* correct);

}  // namespace sluice::trainer

#include "trainer/cpu_kernels.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/blocked_range2d.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "trainer/gelu.h"
#include "trainer/model_constants.h"

namespace sluice::trainer {
namespace {

// Rows of C that share one pass over a panel of B, and the columns of that panel: 4 × 256 floats
// of C (4 KiB) stay in L1 while B's rows stream through.
constexpr int kRowTile = 4;
constexpr int kColTile = 256;

// C[m×n] (+)= A·B with A(i, p) = a[i·a_row + p·a_col] and B[k×n] row-major.
void Gemm(const float* a, int64_t a_row, int64_t a_col, const float* b, float* c, int m, int n,
          int k, bool accumulate) {
  const int row_tiles = (m + kRowTile - 1) / kRowTile;
  const int col_tiles = (n + kColTile - 1) / kColTile;
  tbb::parallel_for(tbb::blocked_range2d<int>(0, row_tiles, 0, col_tiles),
                    [&](const tbb::blocked_range2d<int>& r) {
                      for (int rt = r.rows().begin(); rt != r.rows().end(); ++rt) {
                        const int i0 = rt * kRowTile, rows = std::min(kRowTile, m - i0);
                        for (int ct = r.cols().begin(); ct != r.cols().end(); ++ct) {
                          const int j0 = ct * kColTile, cols = std::min(kColTile, n - j0);
                          if (!accumulate) {
                            for (int i = 0; i < rows; ++i)
                              std::memset(c + (i0 + i) * int64_t{n} + j0, 0, cols * sizeof(float));
                          }
                          if (rows == kRowTile) {
                            float* __restrict c0 = c + (i0 + 0) * int64_t{n} + j0;
                            float* __restrict c1 = c + (i0 + 1) * int64_t{n} + j0;
                            float* __restrict c2 = c + (i0 + 2) * int64_t{n} + j0;
                            float* __restrict c3 = c + (i0 + 3) * int64_t{n} + j0;
                            for (int p = 0; p < k; ++p) {
                              const float* __restrict bp = b + p * int64_t{n} + j0;
                              const float a0 = a[(i0 + 0) * a_row + p * a_col];
                              const float a1 = a[(i0 + 1) * a_row + p * a_col];
                              const float a2 = a[(i0 + 2) * a_row + p * a_col];
                              const float a3 = a[(i0 + 3) * a_row + p * a_col];
                              for (int j = 0; j < cols; ++j) {
                                const float bv = bp[j];
                                c0[j] += a0 * bv;
                                c1[j] += a1 * bv;
                                c2[j] += a2 * bv;
                                c3[j] += a3 * bv;
                              }
                            }
                          } else {
                            for (int i = 0; i < rows; ++i) {
                              float* __restrict ci = c + (i0 + i) * int64_t{n} + j0;
                              for (int p = 0; p < k; ++p) {
                                const float* __restrict bp = b + p * int64_t{n} + j0;
                                const float av = a[(i0 + i) * a_row + p * a_col];
                                for (int j = 0; j < cols; ++j) ci[j] += av * bp[j];
                              }
                            }
                          }
                        }
                      }
                    });
}

}  // namespace

void GemmNN(const float* a, const float* b, float* c, int m, int n, int k, bool accumulate) {
  Gemm(a, k, 1, b, c, m, n, k, accumulate);
}

void GemmNT(const float* a, const float* b, float* c, int m, int n, int k, bool accumulate,
            float* transposed_b_scratch) {
  // b is [n×k]; make it [k×n] so the kernel streams contiguous rows.
  tbb::parallel_for(tbb::blocked_range<int>(0, n), [&](const tbb::blocked_range<int>& r) {
    for (int j = r.begin(); j != r.end(); ++j) {
      for (int p = 0; p < k; ++p) transposed_b_scratch[p * int64_t{n} + j] = b[j * int64_t{k} + p];
    }
  });
  Gemm(a, k, 1, transposed_b_scratch, c, m, n, k, accumulate);
}

void GemmTN(const float* a, const float* b, float* c, int m, int n, int k, bool accumulate) {
  Gemm(a, 1, m, b, c, m, n, k, accumulate);
}

void AddBias(float* y, const float* bias, int rows, int n) {
  tbb::parallel_for(tbb::blocked_range<int>(0, rows), [&](const tbb::blocked_range<int>& r) {
    for (int i = r.begin(); i != r.end(); ++i) {
      float* __restrict yi = y + i * int64_t{n};
      for (int j = 0; j < n; ++j) yi[j] += bias[j];
    }
  });
}

void BiasGrad(const float* dy, float* db, int rows, int n) {
  tbb::parallel_for(tbb::blocked_range<int>(0, n, 64), [&](const tbb::blocked_range<int>& r) {
    for (int i = 0; i < rows; ++i) {
      const float* __restrict di = dy + i * int64_t{n};
      for (int j = r.begin(); j != r.end(); ++j) db[j] += di[j];
    }
  });
}

void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int rows, int n) {
  tbb::parallel_for(tbb::blocked_range<int>(0, rows), [&](const tbb::blocked_range<int>& r) {
    for (int i = r.begin(); i != r.end(); ++i) {
      const float* xi = x + i * int64_t{n};
      float* yi = y + i * int64_t{n};
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += xi[j];
      const float mu = static_cast<float>(sum / n);
      double var = 0;
      for (int j = 0; j < n; ++j) var += double(xi[j] - mu) * (xi[j] - mu);
      const float rs = 1.0f / std::sqrt(static_cast<float>(var / n) + kLayerNormEps);
      for (int j = 0; j < n; ++j) yi[j] = (xi[j] - mu) * rs * gamma[j] + beta[j];
      mean[i] = mu;
      rstd[i] = rs;
    }
  });
}

void LayerNormBackward(const float* x, const float* dy, const float* gamma, const float* mean,
                       const float* rstd, float* dx, float* dgamma, float* dbeta, int rows, int n,
                       bool accumulate_dx) {
  // dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)), g = dy · gamma.
  tbb::parallel_for(tbb::blocked_range<int>(0, rows), [&](const tbb::blocked_range<int>& r) {
    for (int i = r.begin(); i != r.end(); ++i) {
      const float* xi = x + i * int64_t{n};
      const float* dyi = dy + i * int64_t{n};
      float* dxi = dx + i * int64_t{n};
      const float mu = mean[i], rs = rstd[i];
      double sum_g = 0, sum_gx = 0;
      for (int j = 0; j < n; ++j) {
        const float g = dyi[j] * gamma[j];
        sum_g += g;
        sum_gx += double(g) * ((xi[j] - mu) * rs);
      }
      const float mg = static_cast<float>(sum_g / n), mgx = static_cast<float>(sum_gx / n);
      for (int j = 0; j < n; ++j) {
        const float xhat = (xi[j] - mu) * rs;
        const float v = rs * (dyi[j] * gamma[j] - mg - xhat * mgx);
        dxi[j] = accumulate_dx ? dxi[j] + v : v;
      }
    }
  });
  // Parameter gradients reduce over rows: parallel over columns keeps the row order fixed.
  tbb::parallel_for(tbb::blocked_range<int>(0, n, 32), [&](const tbb::blocked_range<int>& r) {
    for (int i = 0; i < rows; ++i) {
      const float* xi = x + i * int64_t{n};
      const float* dyi = dy + i * int64_t{n};
      for (int j = r.begin(); j != r.end(); ++j) {
        dgamma[j] += dyi[j] * ((xi[j] - mean[i]) * rstd[i]);
        dbeta[j] += dyi[j];
      }
    }
  });
}

void GeluForward(const float* x, float* y, int64_t count) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, count, 4096),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i != r.end(); ++i) {
                        y[i] = Gelu(x[i]);
                      }
                    });
}

void GeluBackward(const float* x, const float* dy, float* dx, int64_t count) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, count, 4096),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i != r.end(); ++i) dx[i] = dy[i] * GeluGrad(x[i]);
                    });
}

double SoftmaxCrossEntropy(const float* logits, std::span<const int32_t> labels, int classes,
                           float* dlogits, int64_t* correct) {
  double total = 0;
  int64_t hits = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    const float* z = logits + r * classes;
    float* dz = dlogits + r * classes;
    int argmax = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[argmax]) argmax = c;
    }
    const float zmax = z[argmax];
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(double(z[c]) - zmax);
    const double log_sum = std::log(sum) + zmax;
    total += log_sum - z[labels[r]];
    for (int c = 0; c < classes; ++c) dz[c] = static_cast<float>(std::exp(double(z[c]) - log_sum));
    dz[labels[r]] -= 1.0f;
    hits += argmax == labels[r];
  }
  *correct = hits;
  return total;
}

}  // namespace sluice::trainer

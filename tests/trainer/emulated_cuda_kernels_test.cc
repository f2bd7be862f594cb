// The CUDA backend's kernels (trainer/cuda_*kernels.cu, through its launch functions, with their
// real grid and block shapes) run on the CPU by tests/trainer/simt_emulator.h, against the CPU
// backend's kernels in every precision (the optimizer's: emulated_cuda_optimizer_test.cc). No GPU
// is needed, so this runs in every build with nvcc: it pins the kernels' indexing, reductions,
// barriers and warp shuffles before they ever meet a device. What the emulator cannot show (timing, the memory model, __expf's
// reduced precision, cuBLASLt) is left to tests/trainer/cuda_backend_test.cc on a GPU.
//
// Each case runs three times, the blocks and the threads between barriers scheduled forwards,
// backwards and shuffled, so a result that depends on the order of unsynchronized threads shows;
// the reductions must give the same bits in every order (the README's determinism promise).
#if SLUICE_HAVE_CUDA
#include "tests/trainer/simt_emulator.h"
// This translation unit's copy of the kernels' launch functions stands in for the one in
// sluice_trainer, whose object the linker then never needs.
#include "trainer/cuda_kernels.cu"
#include "trainer/cuda_loss_kernels.cu"
#include "trainer/cuda_optimizer_kernels.cu"

#include "tests/trainer/emulated_cuda_kernels_test_support.h"
#endif

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/trainer/narrow_values.h"
#include "trainer/adamw.h"
#include "trainer/cpu_kernels.h"
#include "trainer/gelu.h"
#include "trainer/model.h"
#include "trainer/precision.h"

#if SLUICE_HAVE_CUDA
namespace sluice::trainer {
namespace {

using kernel_testing::ForEachOrder;
using kernel_testing::HalfUlp;
using kernel_testing::kPrecisions;
using kernel_testing::Narrow;
using kernel_testing::Order;
using kernel_testing::Random;
using kernel_testing::RequireClose;
using kernel_testing::Rounded;
using kernel_testing::ToNarrow;

TEST_CASE("NormalizePatchifyMatchesTheCpuLayout") {
  ModelConfig c;
  c.image_size = 12;
  c.patch = 4;
  const int n = 3, t = c.tokens(), pd = c.patch_dim(), grid = c.image_size / c.patch;
  std::mt19937 rng(5);
  std::vector<uint8_t> images(size_t(n) * c.image_size * c.image_size * 3);
  for (uint8_t& v : images) v = static_cast<uint8_t>(rng());
  // The CPU backend's order: row i·T + gy·grid + gx, columns (py, px, channel).
  const InputNormalization norm;
  std::vector<float> expected(int64_t{n} * t * pd);
  for (int row = 0; row < n * t; ++row) {
    const int i = row / t, gy = (row % t) / grid, gx = row % grid;
    for (int py = 0; py < c.patch; ++py) {
      for (int q = 0; q < c.patch * 3; ++q) {
        const uint8_t v = images[((i * c.image_size + gy * c.patch + py) * c.image_size +
                                  gx * c.patch) * 3 + q];
        expected[int64_t{row} * pd + py * c.patch * 3 + q] = norm.table[q % 3][v];
      }
    }
  }
  for (const Precision p : kPrecisions) {
    INFO(PrecisionName(p));
    ForEachOrder([&] {
      Narrow x0(p, static_cast<int64_t>(expected.size()));
      cuda::NormalizePatchify(images.data(), x0.data(), p, n, c.image_size, c.patch, nullptr);
      // (v·scale - shift) on the device, (v/255 - mean)/std on the CPU: a few fp32 ulps apart,
      // which may round to neighbouring narrow values.
      RequireClose(x0.ToFloat(), Rounded(expected, p), 2 * HalfUlp(p) + 1e-6, 1e-6);
    });
  }
}

TEST_CASE("LayerNormForwardMatchesTheCpuOnWidthsThatAreNotMultiplesOfTheWarp") {
  for (const int d : {20, 70, 300}) {
    const int rows = 37;  // not a multiple of the 8 rows a block takes
    const std::vector<float> x = Random(int64_t{rows} * d, 1, 2.0f);
    const std::vector<float> gamma = Random(d, 2), beta = Random(d, 3);
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                     d);
    for (const Precision p : kPrecisions) {
      INFO("width " << d << ", " << PrecisionName(p));
      ForEachOrder([&] {
        Narrow got(p, int64_t{rows} * d);
        std::vector<float> got_mean(rows, NAN), got_rstd(rows, NAN);
        cuda::LayerNormForward(x.data(), gamma.data(), beta.data(), got.data(), p, got_mean.data(),
                               got_rstd.data(), rows, d, nullptr);
        RequireClose(got_mean, mean, 1e-5, 1e-6);
        RequireClose(got_rstd, rstd, 1e-5, 0);
        RequireClose(got.ToFloat(), Rounded(y, p), 2 * HalfUlp(p) + 1e-5, 1e-5);
      });
    }
  }
}

TEST_CASE("LayerNormBackwardMatchesTheCpuAndAccumulates") {
  // 8,300 rows: the slab count's cap (128) with uneven slabs (65 rows, the last 45), and a last
  // block of 8 warps with rows for only 4.
  for (const auto& [rows, d] : {std::pair{37, 70}, std::pair{8300, 12}}) {
    const std::vector<float> x = Random(int64_t{rows} * d, 4, 2.0f);
    const std::vector<float> dy = Random(int64_t{rows} * d, 5);
    const std::vector<float> gamma = Random(d, 6);
    const std::vector<float> beta(d, 0.0f);
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                     d);
    for (const bool accumulate : {false, true}) {
      const std::vector<float> dx_before = Random(int64_t{rows} * d, 7);
      const std::vector<float> dgamma_before = Random(d, 8), dbeta_before = Random(d, 9);
      std::vector<float> dx = dx_before, dgamma = dgamma_before, dbeta = dbeta_before;
      LayerNormBackward(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                        dgamma.data(), dbeta.data(), rows, d, accumulate);
      for (const Precision p : kPrecisions) {
        INFO(rows << "×" << d << ", accumulate " << accumulate << ", " << PrecisionName(p));
        ForEachOrder([&] {
          std::vector<float> got_dx = dx_before, got_dgamma = dgamma_before,
                             got_dbeta = dbeta_before;
          Narrow got_narrow(p, int64_t{rows} * d);
          std::vector<float> scratch(cuda::ColumnReductionScratch(rows, d), NAN);
          cuda::LayerNormBackward(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(),
                                  got_dx.data(), got_narrow.data(), p, got_dgamma.data(),
                                  got_dbeta.data(), scratch.data(), rows, d, accumulate, nullptr);
          RequireClose(got_dx, dx, 1e-4, 1e-5);
          RequireClose(got_narrow.ToFloat(), Rounded(dx, p), 2 * HalfUlp(p) + 1e-4, 1e-5);
          // Σ over thousands of rows in another order.
          RequireClose(got_dgamma, dgamma, 1e-4, 1e-3);
          RequireClose(got_dbeta, dbeta, 1e-4, 1e-3);
        });
      }
    }
  }
}

TEST_CASE("LayerNormBackwardWithoutANarrowCopyWritesOnlyFp32") {
  const int rows = 9, d = 40;
  const std::vector<float> x = Random(rows * d, 10), dy = Random(rows * d, 11);
  const std::vector<float> gamma(d, 1.0f), beta(d, 0.0f);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dgamma(d), dbeta(d);
  LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                   d);
  LayerNormBackward(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                    dgamma.data(), dbeta.data(), rows, d, false);
  ForEachOrder([&] {
    std::vector<float> got_dx(x.size(), NAN), got_dgamma(d, 0.0f), got_dbeta(d, 0.0f);
    std::vector<float> scratch(cuda::ColumnReductionScratch(rows, d), NAN);
    cuda::LayerNormBackward(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(),
                            got_dx.data(), nullptr, Precision::kBf16, got_dgamma.data(),
                            got_dbeta.data(), scratch.data(), rows, d, false, nullptr);
    RequireClose(got_dx, dx, 1e-4, 1e-5);
  });
}

TEST_CASE("GeluBiasForwardAndBackwardMatchTheCpuInPlace") {
  const int rows = 33, cols = 24;
  const std::vector<float> x = Random(rows * cols, 12, 2.0f), bias = Random(cols, 13);
  const std::vector<float> dy = Random(rows * cols, 14);
  for (const Precision p : kPrecisions) {
    INFO(PrecisionName(p));
    // The CPU backend's rounding points (cuBLASLt's): GELU of the fp32 sum, which is also kept
    // rounded for the backward pass.
    std::vector<float> pre(x.size());
    const std::vector<float> xr = Rounded(x, p), br = Rounded(bias, p);
    for (int64_t e = 0; e < rows * cols; ++e) pre[e] = xr[e] + br[e % cols];
    std::vector<float> act(pre.size()), dpre(pre.size());
    GeluForward(pre.data(), act.data(), static_cast<int64_t>(act.size()));
    pre = Rounded(pre, p);
    const std::vector<float> dyr = Rounded(dy, p);
    GeluBackward(pre.data(), dyr.data(), dpre.data(), static_cast<int64_t>(dpre.size()));
    ForEachOrder([&] {
      // x and y alias, as in the GEMM fallback's in-place use.
      Narrow inout = ToNarrow(x, p), got_pre(p, rows * cols);
      const Narrow b = ToNarrow(bias, p);
      cuda::GeluBiasForward(inout.data(), b.data(), got_pre.data(), inout.data(), p, rows, cols,
                            nullptr);
      REQUIRE(got_pre.ToFloat() == pre);
      REQUIRE(inout.ToFloat() == Rounded(act, p));
      Narrow grad = ToNarrow(dy, p);
      cuda::GeluBackward(got_pre.data(), grad.data(), grad.data(), p, rows * cols, nullptr);
      REQUIRE(grad.ToFloat() == Rounded(dpre, p));
      // Without a bias and without keeping the pre-activation.
      Narrow plain = ToNarrow(x, p), out(p, rows * cols);
      cuda::GeluBiasForward(plain.data(), nullptr, nullptr, out.data(), p, rows, cols, nullptr);
      for (int64_t e = 0; e < rows * cols; ++e) {
        REQUIRE(out.Get(e) == RoundToPrecision(Gelu(plain.Get(e)), p));
      }
    });
  }
}

TEST_CASE("BiasKernelsCoverEveryRowAndColumnTile") {
  // 600 rows: ten slabs of 60; 300 columns: two 256-column blocks.
  const int rows = 600, cols = 300;
  const std::vector<float> y0 = Random(rows * cols, 15), bias = Random(cols, 16);
  const std::vector<float> dy = Random(rows * cols, 17);
  for (const Precision p : kPrecisions) {
    INFO(PrecisionName(p));
    std::vector<float> with_bias = Rounded(y0, p);
    AddBias(with_bias.data(), Rounded(bias, p).data(), rows, cols);
    const std::vector<float> db_before = Random(cols, 18);
    std::vector<float> db = db_before;
    BiasGrad(Rounded(dy, p).data(), db.data(), rows, cols);
    ForEachOrder([&] {
      Narrow y = ToNarrow(y0, p);
      const Narrow b = ToNarrow(bias, p);
      cuda::AddBias(y.data(), b.data(), p, rows, cols, nullptr);
      REQUIRE(y.ToFloat() == Rounded(with_bias, p));
      const Narrow g = ToNarrow(dy, p);
      std::vector<float> got_db = db_before, scratch(cuda::ColumnReductionScratch(rows, cols), NAN);
      cuda::BiasGrad(g.data(), p, got_db.data(), scratch.data(), rows, cols, nullptr);
      RequireClose(got_db, db, 1e-5, 1e-4);
    });
  }
}

// Two GPU runs with one seed give the same bits only if no reduction depends on the order blocks
// (or threads) run in: an atomicAdd reduction fails this in the emulator's reverse or shuffled
// schedule (EmulatorShowsAnAtomicReductionDependsOnBlockOrder below).
TEST_CASE("ColumnReductionsAreTheSameBitsInEveryBlockOrder") {
  const int rows = 5000, d = 300;  // 79 slabs, two column blocks
  const std::vector<float> x = Random(int64_t{rows} * d, 30, 2.0f);
  const std::vector<float> dy = Random(int64_t{rows} * d, 31), gamma = Random(d, 32);
  const std::vector<float> beta(d, 0.0f);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                   d);
  const Narrow narrow_dy = ToNarrow(dy, Precision::kBf16);
  std::vector<std::vector<float>> first;
  for (const Order order : kernel_testing::kOrders) {
    INFO(kernel_testing::OrderName(order) << " schedule");
    sluice_simt::SetOrder(order);
    sluice_simt::ClearError();
    std::vector<float> dx(x.size()), dgamma(d, 0.5f), dbeta(d, 0.5f), db(d, 0.5f);
    std::vector<float> scratch(cuda::ColumnReductionScratch(rows, d), NAN);
    cuda::LayerNormBackward(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                            nullptr, Precision::kFp32, dgamma.data(), dbeta.data(), scratch.data(),
                            rows, d, false, nullptr);
    cuda::BiasGrad(narrow_dy.data(), Precision::kBf16, db.data(), scratch.data(), rows, d, nullptr);
    REQUIRE(sluice_simt::LastError().empty());
    const std::vector<std::vector<float>> got = {dx, dgamma, dbeta, db};
    if (first.empty()) first = got;
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i << " (dx, dgamma, dbeta, db)");
      REQUIRE(std::memcmp(got[i].data(), first[i].data(), got[i].size() * sizeof(float)) == 0);
    }
  }
  sluice_simt::SetOrder(Order::kForward);
}

// Past 65,535 × 256 rows the old one-slab-per-256-rows grid went over grid.y's limit; the slabs
// are capped now. One column of ones: every row counted once.
TEST_CASE("BiasGradPastSixteenMillionRowsKeepsItsGridInBounds") {
  const int rows = 65535 * 256 + 1000, cols = 1;
  const Narrow ones = ToNarrow(std::vector<float>(rows, 1.0f), Precision::kBf16);
  std::vector<float> db(cols, 0.0f), scratch(cuda::ColumnReductionScratch(rows, cols), NAN);
  sluice_simt::ClearError();
  cuda::BiasGrad(ones.data(), Precision::kBf16, db.data(), scratch.data(), rows, cols, nullptr);
  INFO(sluice_simt::LastError());
  REQUIRE(sluice_simt::LastError().empty());
  REQUIRE(db[0] == static_cast<float>(rows));  // slabs of at most 2¹⁷ rows: exact partials
}

TEST_CASE("MeanPoolForwardAndBackwardMatchTheCpu") {
  const int n = 5, tokens = 9, d = 70;
  const std::vector<float> h = Random(int64_t{n} * tokens * d, 19);
  std::vector<float> pooled(n * d, 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int t = 0; t < tokens; ++t) {
      for (int j = 0; j < d; ++j) pooled[i * d + j] += h[(i * tokens + t) * d + j];
    }
    for (int j = 0; j < d; ++j) pooled[i * d + j] /= tokens;
  }
  const std::vector<float> dpooled = Random(n * d, 20);
  for (const Precision p : kPrecisions) {
    INFO(PrecisionName(p));
    ForEachOrder([&] {
      std::vector<float> got(n * d, NAN);
      cuda::MeanPoolForward(h.data(), got.data(), n, tokens, d, nullptr);
      RequireClose(got, pooled, 1e-6, 1e-6);
      std::vector<float> dh(h.size(), NAN);
      Narrow dh_narrow(p, static_cast<int64_t>(h.size()));
      cuda::MeanPoolBackward(dpooled.data(), dh.data(), dh_narrow.data(), p, n, tokens, d,
                             nullptr);
      for (int64_t e = 0; e < static_cast<int64_t>(h.size()); ++e) {
        const float expected = dpooled[(e / d / tokens) * d + e % d] / tokens;
        REQUIRE(dh[e] == expected);
        REQUIRE(dh_narrow.Get(e) == RoundToPrecision(expected, p));
      }
    });
  }
}

TEST_CASE("SoftmaxCrossEntropyMatchesTheCpuAndBreaksArgmaxTiesLow") {
  // 1,000 classes: each of the block's 256 threads takes several.
  for (const int classes : {7, 1000}) {
    const int n = 6;
    std::vector<float> logits = Random(int64_t{n} * classes, 21, 3.0f);
    // Sample 0: a tie for the maximum at classes 1 and 4, won by 1 (as on the CPU).
    logits[1] = logits[4] = 50.0f;
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (i * 5 + 1) % classes;
    std::vector<float> dlogits(logits.size());
    int64_t correct = 0;
    const double loss =
        SoftmaxCrossEntropy(logits.data(), labels, classes, dlogits.data(), &correct);
    REQUIRE(correct >= 1);  // sample 0: label 1
    for (const Precision p : kPrecisions) {
      for (const float scale : {1.0f, 1024.0f}) {
        INFO(classes << " classes, " << PrecisionName(p) << ", loss scale " << scale);
        ForEachOrder([&] {
          cuda::StepScalars scalars{};
          scalars.loss_sum = 1.5;  // accumulates over micro-batches
          scalars.correct = 2;
          Narrow got(p, int64_t{n} * classes);
          std::vector<float> row_loss(n, NAN);
          std::vector<int> row_correct(n, -1);
          cuda::SoftmaxCrossEntropy(logits.data(), labels.data(), n, classes,
                                    scale == 1.0f ? nullptr : &scale, got.data(), p,
                                    row_loss.data(), row_correct.data(), &scalars, nullptr);
          CHECK(scalars.loss_sum == Approx(1.5 + loss).epsilon(1e-5));
          CHECK(scalars.correct == 2 + correct);
          CHECK(row_correct[0] == 1);
          std::vector<float> scaled = dlogits;
          for (float& v : scaled) v *= scale;
          RequireClose(got.ToFloat(), Rounded(scaled, p), 2 * HalfUlp(p) + 1e-5, 1e-6 * scale);
        });
      }
    }
  }
}

TEST_CASE("CastToNarrowRoundsLikeTheCpuEmulation") {
  std::vector<float> values = Random(5000, 26, 100.0f);
  values.insert(values.end(), {0.0f, -0.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 1e-8f, 3e-5f,
                               std::numeric_limits<float>::infinity()});
  for (const Precision p : kPrecisions) {
    INFO(PrecisionName(p));
    ForEachOrder([&] {
      Narrow got(p, static_cast<int64_t>(values.size()));
      cuda::CastToNarrow(values.data(), got.data(), p, static_cast<int64_t>(values.size()),
                         nullptr);
      const std::vector<float> expected = Rounded(values, p);
      for (size_t i = 0; i < values.size(); ++i) {
        INFO(values[i]);
        REQUIRE(got.Get(static_cast<int64_t>(i)) == expected[i]);
      }
    });
  }
}

// The emulator itself: a barrier that some threads skip is reported, not run through.
void SkipsTheBarrierKernel(int* out) {
  if (threadIdx.x >= 32) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
void ShufflesInHalfAWarpKernel(float* out) {
  if (threadIdx.x % 32 >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Sums in[0..n) with one atomicAdd per block, the pattern the reductions no longer use.
void AtomicSumKernel(const float* in, float* out) {
  atomicAdd(out, in[blockIdx.x * blockDim.x + threadIdx.x]);
}
void UsesSharedMemoryKernel(float* out) {
  sluice_simt::DynamicShared<float>()[threadIdx.x] = 1.0f;
  out[threadIdx.x] = sluice_simt::DynamicShared<float>()[threadIdx.x];
}

TEST_CASE("EmulatorShowsAnAtomicReductionDependsOnBlockOrder") {
  const std::vector<float> in = Random(64 * 32, 40, 1000.0f);
  std::vector<float> sums;
  for (const Order order : kernel_testing::kOrders) {
    sluice_simt::SetOrder(order);
    float sum = 0;
    sluice_simt::Launch(AtomicSumKernel, 64, 32, 0, nullptr, in.data(), &sum);
    sums.push_back(sum);
  }
  sluice_simt::SetOrder(Order::kForward);
  CHECK((sums[0] != sums[1] || sums[0] != sums[2]));
}

TEST_CASE("EmulatorEnforcesTheHardwareLaunchLimits") {
  std::vector<float> out(64, 0.0f);
  sluice_simt::ClearError();
  sluice_simt::Launch(UsesSharedMemoryKernel, dim3(1, 65536), 1, 4, nullptr, out.data());
  CHECK_THAT(sluice_simt::LastError(), Catch::Contains("grid 1×65536×1"));
  sluice_simt::ClearError();
  sluice_simt::Launch(UsesSharedMemoryKernel, dim3(1, 1, 65536), 1, 4, nullptr, out.data());
  CHECK_THAT(sluice_simt::LastError(), Catch::Contains("grid 1×1×65536"));
  sluice_simt::ClearError();
  sluice_simt::Launch(UsesSharedMemoryKernel, dim3(1, 65535, 1), 1, 4, nullptr, out.data());
  CHECK(sluice_simt::LastError().empty());
  // Over 48 KiB of dynamic shared memory only after the opt-in, and that only up to 227 KiB.
  const size_t bytes = 64 * 1024;
  sluice_simt::Launch(UsesSharedMemoryKernel, 1, 64, bytes, nullptr, out.data());
  CHECK_THAT(sluice_simt::LastError(), Catch::Contains("cudaFuncAttributeMaxDynamicSharedMemory"));
  sluice_simt::ClearError();
  CHECK(cudaFuncSetAttribute(UsesSharedMemoryKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             228 * 1024) == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(UsesSharedMemoryKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               bytes) == cudaSuccess);
  sluice_simt::Launch(UsesSharedMemoryKernel, 1, 64, bytes, nullptr, out.data());
  CHECK(sluice_simt::LastError().empty());
  CHECK(out[63] == 1.0f);
  sluice_simt::ClearError();
}

TEST_CASE("EmulatorReportsDivergentBarriersAndShuffles") {
  std::vector<int> ints(64, 0);
  sluice_simt::ClearError();
  sluice_simt::Launch(SkipsTheBarrierKernel, 1, 64, 0, nullptr, ints.data());
  CHECK_THAT(sluice_simt::LastError(), Catch::Contains("divergent __syncthreads"));
  std::vector<float> floats(32, 0.0f);
  sluice_simt::ClearError();
  sluice_simt::Launch(ShufflesInHalfAWarpKernel, 1, 32, 0, nullptr, floats.data());
  CHECK_THAT(sluice_simt::LastError(), Catch::Contains("divergent warp shuffle"));
  sluice_simt::ClearError();
}

}  // namespace
}  // namespace sluice::trainer
#endif  // SLUICE_HAVE_CUDA

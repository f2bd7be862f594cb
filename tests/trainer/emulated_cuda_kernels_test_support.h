// Shared by the emulated CUDA kernel tests: device-precision host buffers, random and rounded
// values, tolerances, and running a case once per scheduling order of the SIMT emulator.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/trainer/narrow_values.h"
#include "tests/trainer/simt_emulator.h"
#include "trainer/precision.h"

namespace sluice::trainer::kernel_testing {

using sluice_simt::Order;

inline const Precision kPrecisions[] = {Precision::kFp32, Precision::kBf16, Precision::kFp16};

// Values of `p` as the device stores them (the kernels' element type), in host vectors.
class Narrow {
 public:
  Narrow(Precision p, int64_t count) : p_(p), bytes_(count * ElementSize(p)) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()) / ElementSize(p_); }
  float Get(int64_t i) const { return testing::LoadNarrow(bytes_.data(), i, p_); }
  void Set(int64_t i, float v) { testing::StoreNarrow(bytes_.data(), i, p_, v); }
  std::vector<float> ToFloat() const {
    std::vector<float> out(size());
    for (int64_t i = 0; i < size(); ++i) out[i] = Get(i);
    return out;
  }

 private:
  Precision p_;
  std::vector<unsigned char> bytes_;
};

inline Narrow ToNarrow(const std::vector<float>& values, Precision p) {
  Narrow out(p, static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) out.Set(static_cast<int64_t>(i), values[i]);
  return out;
}

inline std::vector<float> Rounded(std::vector<float> values, Precision p) {
  RoundInPlace(values.data(), static_cast<int64_t>(values.size()), p);
  return values;
}

inline std::vector<float> Random(int64_t count, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

// Half a unit in the last place of `p`, relative: the most that rounding one fp32 value moves it.
inline double HalfUlp(Precision p) {
  return p == Precision::kBf16 ? 1.0 / 256 : p == Precision::kFp16 ? 1.0 / 2048 : 1.0 / (1 << 24);
}

// Every element of `got` within `relative`·|expected| + `absolute` of `expected`.
inline void RequireClose(const std::vector<float>& got, const std::vector<float>& expected,
                         double relative, double absolute) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(double(got[i]) - expected[i]) <= relative * std::abs(expected[i]) + absolute)
      continue;
    FAIL("element " << i << " of " << got.size() << ": " << got[i] << ", expected " << expected[i]);
  }
}

inline const Order kOrders[] = {Order::kForward, Order::kReverse, Order::kShuffled};

inline const char* OrderName(Order order) {
  return order == Order::kForward ? "forward" : order == Order::kReverse ? "reverse" : "shuffled";
}

// Runs `body` once per scheduling order, clearing the emulator's error and requiring that no
// launch failed.
template <typename F>
inline void ForEachOrder(F&& body) {
  for (const Order order : kOrders) {
    INFO(OrderName(order) << " schedule");
    sluice_simt::SetOrder(order);
    sluice_simt::ClearError();
    body();
    INFO(sluice_simt::LastError());
    REQUIRE(sluice_simt::LastError().empty());
  }
  sluice_simt::SetOrder(Order::kForward);
}

}  // namespace sluice::trainer::kernel_testing

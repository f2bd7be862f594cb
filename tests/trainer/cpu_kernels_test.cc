// The CPU GEMMs against a naive triple loop, over shapes that exercise the row and column tiles'
// edges, overwriting and accumulating.
#include "trainer/cpu_kernels.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

namespace sluice::trainer {
namespace {

enum class Form { kNN, kNT, kTN };

struct GemmCase {
  Form form;
  int m, n, k;
  bool accumulate;
};

TEST_CASE("GemmMatchesNaiveProduct") {
  const GemmCase cases[] = {
      {Form::kNN, 1, 1, 1, false},    {Form::kNN, 7, 300, 5, false}, {Form::kNN, 9, 257, 33, true},
      {Form::kNT, 13, 17, 19, false}, {Form::kNT, 4, 513, 3, true},  {Form::kTN, 5, 6, 70, false},
      {Form::kTN, 259, 11, 8, true},
  };
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const GemmCase& c : cases) {
    CAPTURE(static_cast<int>(c.form), c.m, c.n, c.k, c.accumulate);
    std::vector<float> a(c.m * c.k), b(c.k * c.n), out(c.m * c.n), expected(c.m * c.n);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    for (float& v : out) v = u(rng);
    // A(i, p) and B(p, j) in the layout each form takes.
    auto A = [&](int i, int p) { return c.form == Form::kTN ? a[p * c.m + i] : a[i * c.k + p]; };
    auto B = [&](int p, int j) { return c.form == Form::kNT ? b[j * c.k + p] : b[p * c.n + j]; };
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        double s = c.accumulate ? out[i * c.n + j] : 0.0;
        for (int p = 0; p < c.k; ++p) s += double(A(i, p)) * B(p, j);
        expected[i * c.n + j] = static_cast<float>(s);
      }
    }
    std::vector<float> scratch(c.k * c.n);
    switch (c.form) {
      case Form::kNN:
        GemmNN(a.data(), b.data(), out.data(), c.m, c.n, c.k, c.accumulate);
        break;
      case Form::kNT:
        GemmNT(a.data(), b.data(), out.data(), c.m, c.n, c.k, c.accumulate, scratch.data());
        break;
      case Form::kTN:
        GemmTN(a.data(), b.data(), out.data(), c.m, c.n, c.k, c.accumulate);
        break;
    }
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == Approx(expected[i]).margin(1e-4));
  }
}

}  // namespace
}  // namespace sluice::trainer

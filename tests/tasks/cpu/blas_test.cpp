#include "tasks/cpu/blas.h"

#include <catch2/catch.hpp>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks::cpu {
namespace {

// Reference: C = op(A) op(B), row-major, in double.
std::vector<double> naive(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k,
                          const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> c(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::size_t p = 0; p < k; ++p) {
        const float av = ta ? a[p * m + i] : a[i * k + p];
        const float bv = tb ? b[j * k + p] : b[p * n + j];
        s += static_cast<double>(av) * bv;
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

}  // namespace

TEST_CASE("sgemm matches a naive product for every transpose", "[tasks][blas]") {
  const std::size_t m = 5, n = 3, k = 4;
  const auto a = testing::random_floats(m * k, 1);
  const auto b = testing::random_floats(k * n, 2);
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      std::vector<float> c(m * n, 0.0f);
      sgemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
      const auto ref = naive(ta, tb, m, n, k, a, b);
      for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i] == Approx(ref[i]).margin(1e-5));
    }
  }
}

TEST_CASE("set_blas_threads rejects non-positive counts", "[tasks][blas]") {
  CHECK_THROWS_AS(set_blas_threads(0), ConfigError);
  CHECK_NOTHROW(set_blas_threads(1));
}

}  // namespace gradmesh::tasks::cpu

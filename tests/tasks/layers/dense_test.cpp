#include "tasks/layers/dense.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {
namespace {

using testing::central_difference;
using testing::gradients_agree;
using testing::random_floats;

constexpr std::size_t kIn = 5, kOut = 4, kBatch = 3;

struct DenseFixture {
  Dense layer{kIn, kOut};
  std::vector<float> params = std::vector<float>(layer.parameter_count());
  std::vector<float> grads = std::vector<float>(layer.parameter_count());
  std::vector<float> x = random_floats(kBatch * kIn, 11);
  std::vector<float> r = random_floats(kBatch * kOut, 12);  // L = sum(y .* r), so dL/dy = r
  std::vector<float> y = std::vector<float>(kBatch * kOut);

  DenseFixture() {
    layer.bind(params, grads);
    layer.initialize(3);
    // Non-zero bias so the bias path is exercised in forward.
    for (std::size_t m = 0; m < kOut; ++m) layer.bias()[m] = 0.1f * static_cast<float>(m);
  }
  double objective() {
    layer.forward(x.data(), y.data(), kBatch);
    double l = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
    return l;
  }
};

}  // namespace

TEST_CASE("Dense layout and init and forward against a naive loop", "[tasks][dense]") {
  DenseFixture f;
  CHECK(f.layer.kind() == "dense");
  CHECK(f.layer.parameter_count() == kOut * kIn + kOut);
  CHECK(f.layer.weights().data() == f.params.data());
  CHECK(f.layer.bias().data() == f.params.data() + kOut * kIn);
  const float a = std::sqrt(6.0f / (kIn + kOut));
  for (const float w : f.layer.weights()) CHECK(std::abs(w) <= a);

  f.layer.forward(f.x.data(), f.y.data(), kBatch);
  for (std::size_t k = 0; k < kBatch; ++k) {
    for (std::size_t m = 0; m < kOut; ++m) {
      double s = f.params[kOut * kIn + m];
      for (std::size_t n = 0; n < kIn; ++n) {
        s += static_cast<double>(f.x[k * kIn + n]) * f.params[m * kIn + n];
      }
      CHECK(f.y[k * kOut + m] == Approx(s).margin(1e-5));
    }
  }
}

TEST_CASE("Dense init is deterministic per seed", "[tasks][dense]") {
  DenseFixture a, b;
  CHECK(a.params == b.params);
  b.layer.initialize(4);
  CHECK(a.params != b.params);
}

TEST_CASE("Dense parameter and input gradients match finite differences", "[tasks][dense]") {
  DenseFixture f;
  std::vector<float> dx(kBatch * kIn);
  f.layer.forward(f.x.data(), f.y.data(), kBatch);
  f.layer.backward(f.x.data(), f.y.data(), f.r.data(), dx.data(), kBatch);
  const std::vector<float> analytic = f.grads;

  for (std::size_t i = 0; i < f.params.size(); ++i) {
    const double numeric = central_difference(f.params[i], [&] { return f.objective(); });
    INFO("parameter " << i << " analytic " << analytic[i] << " numeric " << numeric);
    CHECK(gradients_agree(analytic[i], numeric));
  }
  for (std::size_t i = 0; i < f.x.size(); ++i) {
    const double numeric = central_difference(f.x[i], [&] { return f.objective(); });
    INFO("input " << i << " analytic " << dx[i] << " numeric " << numeric);
    CHECK(gradients_agree(dx[i], numeric));
  }
}

TEST_CASE("Dense backward overwrites gradients and may skip dx", "[tasks][dense]") {
  DenseFixture f;
  f.layer.forward(f.x.data(), f.y.data(), kBatch);
  f.layer.backward(f.x.data(), f.y.data(), f.r.data(), nullptr, kBatch);
  const std::vector<float> once = f.grads;
  f.layer.backward(f.x.data(), f.y.data(), f.r.data(), nullptr, kBatch);
  CHECK(f.grads == once);
  // db is the column sums of dY.
  for (std::size_t m = 0; m < kOut; ++m) {
    double s = 0.0;
    for (std::size_t k = 0; k < kBatch; ++k) s += f.r[k * kOut + m];
    CHECK(f.layer.bias_gradients()[m] == Approx(s).margin(1e-6));
  }
}

TEST_CASE("Dense rejects bad shapes", "[tasks][dense]") {
  CHECK_THROWS_AS(Dense(0, 3), ConfigError);
  Dense d(2, 2);
  std::vector<float> p(5), g(6);
  CHECK_THROWS_AS(d.bind(p, g), ContractError);
}

}  // namespace gradmesh::tasks

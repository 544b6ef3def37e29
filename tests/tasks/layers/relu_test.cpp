#include "tasks/layers/relu.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {

TEST_CASE("Relu forward clamps negatives", "[tasks][relu]") {
  Relu relu(3);
  CHECK(relu.kind() == "relu");
  CHECK(relu.parameter_count() == 0);
  const std::vector<float> x = {-1.0f, 0.0f, 2.5f, 3.0f, -0.5f, 0.25f};
  std::vector<float> y(6);
  relu.forward(x.data(), y.data(), 2);
  CHECK(y == std::vector<float>{0.0f, 0.0f, 2.5f, 3.0f, 0.0f, 0.25f});
}

TEST_CASE("Relu input gradient matches finite differences away from the kink", "[tasks][relu]") {
  constexpr std::size_t kFeatures = 6, kBatch = 4;
  Relu relu(kFeatures);
  auto x = testing::random_floats(kFeatures * kBatch, 21);
  // Keep every input at least 0.1 from 0, far beyond eps = 1e-3, so no difference crosses the kink.
  for (float& v : x) v = v < 0.0f ? v - 0.1f : v + 0.1f;
  const auto r = testing::random_floats(kFeatures * kBatch, 22);
  std::vector<float> y(x.size()), dx(x.size());
  auto objective = [&] {
    relu.forward(x.data(), y.data(), kBatch);
    double l = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
    return l;
  };
  objective();
  relu.backward(x.data(), y.data(), r.data(), dx.data(), kBatch);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double numeric = testing::central_difference(x[i], objective);
    INFO("input " << i);
    CHECK(testing::gradients_agree(dx[i], numeric));
  }
}

}  // namespace gradmesh::tasks

#include "tasks/optim/sgd.h"

#include <catch2/catch.hpp>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {

TEST_CASE("Sgd step matches a hand-computed example", "[tasks][sgd]") {
  const Sgd sgd({0.1f, 0.9f, 0.01f});
  std::vector<float> w = {1.0f, -2.0f};
  std::vector<float> v = {0.0f, 0.0f};
  const std::vector<float> g = {0.5f, 0.25f};
  sgd.step(w, g, v);
  // Step 1: g' = g + 0.01 w = (0.51, 0.23); v = g'; w -= 0.1 v -> (0.949, -2.023).
  CHECK(v[0] == Approx(0.51f));
  CHECK(v[1] == Approx(0.23f));
  CHECK(w[0] == Approx(0.949f));
  CHECK(w[1] == Approx(-2.023f));
  sgd.step(w, g, v);
  // Step 2: g' = (0.5 + 0.00949, 0.25 - 0.02023) = (0.50949, 0.22977);
  // v = 0.9 * (0.51, 0.23) + g' = (0.96849, 0.43677); w -= 0.1 v -> (0.852151, -2.066677).
  CHECK(v[0] == Approx(0.96849f));
  CHECK(v[1] == Approx(0.43677f));
  CHECK(w[0] == Approx(0.852151f));
  CHECK(w[1] == Approx(-2.066677f));
}

TEST_CASE("Sgd without momentum is plain gradient descent", "[tasks][sgd]") {
  const Sgd sgd({0.5f, 0.0f, 0.0f});
  std::vector<float> w = {1.0f}, v = {0.0f};
  const std::vector<float> g = {2.0f};
  sgd.step(w, g, v);
  sgd.step(w, g, v);
  CHECK(w[0] == -1.0f);
}

TEST_CASE("Sgd step_sum equals step on the mean", "[tasks][sgd]") {
  const Sgd sgd({0.05f, 0.9f, 1e-4f});
  constexpr std::size_t kN = 37, kNodes = 3;
  std::vector<std::vector<float>> g;
  for (std::size_t k = 0; k < kNodes; ++k) g.push_back(testing::random_floats(kN, 60 + k));
  auto w1 = testing::random_floats(kN, 70);
  auto w2 = w1;
  std::vector<float> v1(kN, 0.0f), v2(kN, 0.0f), scratch(kN), mean(kN);
  const std::vector<std::span<const float>> spans(g.begin(), g.end());
  const float scale = 1.0f / kNodes;
  for (int step = 0; step < 3; ++step) {
    sgd.step_sum(w1, spans, scale, v1, scratch);
    for (std::size_t i = 0; i < kN; ++i) mean[i] = (g[0][i] + g[1][i] + g[2][i]) * scale;
    sgd.step(w2, mean, v2);
  }
  CHECK(w1 == w2);  // same order of additions: bit-identical
  CHECK(v1 == v2);
}

TEST_CASE("Sgd validates options and sizes", "[tasks][sgd]") {
  CHECK_THROWS_AS(Sgd({-0.1f, 0.9f, 0.0f}), ConfigError);
  CHECK_THROWS_WITH(Sgd({0.1f, 1.0f, 0.0f}), Catch::Contains("sgd.momentum"));
  CHECK_THROWS_AS(Sgd({0.1f, 0.5f, -1.0f}), ConfigError);
  const Sgd sgd({});
  CHECK(sgd.options().lr == 0.1f);
  std::vector<float> w(3), g(2), v(3), s(3);
  CHECK_THROWS_AS(sgd.step(w, g, v), ContractError);
  const std::vector<std::span<const float>> none;
  CHECK_THROWS_AS(sgd.step_sum(w, none, 1.0f, v, s), ContractError);
}

}  // namespace gradmesh::tasks

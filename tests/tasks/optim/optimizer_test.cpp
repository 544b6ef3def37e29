// Tests for tasks/optim/optimizer.h: one velocity per parameter, addressed by model offset.

#include "tasks/optim/optimizer.h"

#include <catch2/catch.hpp>
#include <vector>

#include "engine/error.h"

using namespace gradmesh::tasks;

TEST_CASE("Optimizer: steps at an offset use that slice of the velocity and equal Sgd") {
  const SgdOptions o{0.1f, 0.9f, 0.01f};
  Optimizer optimizer(o, 6);
  std::vector<float> w{1, 2, 3}, g{0.5f, -1, 2};
  std::vector<float> w_ref = w, v_ref(3, 0.0f);
  const Sgd sgd(o);
  for (int step = 0; step < 3; ++step) {
    optimizer.step(3, w, g);
    sgd.step(w_ref, g, v_ref);
  }
  CHECK(w == w_ref);
  const auto v = optimizer.velocity();
  CHECK(v[0] == 0.0f);  // the slice before the offset is untouched
  CHECK(std::vector<float>(v.begin() + 3, v.end()) == v_ref);
}

TEST_CASE("Optimizer: step_sum is the scaled sum, stepped with momentum") {
  Optimizer optimizer({1.0f, 0.0f, 0.0f}, 2);
  std::vector<float> w{0, 0}, a{1, 2}, b{3, 4}, scratch(2);
  const std::vector<std::span<const float>> grads{a, b};
  optimizer.step_sum(0, w, grads, 0.5f, scratch);
  CHECK(scratch == std::vector<float>{2, 3});
  CHECK(w == std::vector<float>{-2, -3});
}

TEST_CASE("Optimizer: step_plain folds weight decay into the gradient and keeps no velocity") {
  Optimizer optimizer({0.5f, 0.9f, 0.1f}, 2);
  std::vector<float> w{1, 2}, g{1, 1};
  optimizer.step_plain(w, g);
  CHECK(g[0] == Approx(1.1f));
  CHECK(w[0] == Approx(1 - 0.5f * 1.1f));
  CHECK(optimizer.velocity()[0] == 0.0f);
}

TEST_CASE("Optimizer: ranges outside the model and bad options are errors") {
  Optimizer optimizer({0.1f, 0.0f, 0.0f}, 2);
  std::vector<float> w{1, 2}, g{1, 1};
  CHECK_THROWS_AS(optimizer.step(1, w, g), gradmesh::ContractError);
  CHECK_THROWS_AS(Optimizer({0.1f, 1.5f, 0.0f}, 2), gradmesh::ConfigError);
}

#include "sync/poseidon/sf_rebuild.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tasks/layers/dense.h"

using gradmesh::sync::rebuild_dense_gradient;

namespace {
std::vector<float> random_vector(std::size_t size, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = dist(rng);
  return v;
}
}  // namespace

TEST_CASE("SF rebuild equals the summed dense gradient for random shapes", "[sync][poseidon][sfb]") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 12; ++trial) {
    const std::size_t nodes = 1 + rng() % 4, k = 1 + rng() % 9, m = 1 + rng() % 40,
                      n = 1 + rng() % 50;
    INFO("nodes " << nodes << " K " << k << " M " << m << " N " << n);
    // Each node's dense layer gets its own batch x_p (K x N) and output gradient dy_p (K x M).
    std::vector<float> u_all, v_all, expected_dw(m * n, 0.0f), expected_db(m, 0.0f);
    gradmesh::tasks::Dense layer(n, m);
    std::vector<float> params(layer.parameter_count()), grads(layer.parameter_count());
    layer.bind(params, grads);
    layer.initialize(7);
    std::vector<float> y(k * m);
    for (std::size_t p = 0; p < nodes; ++p) {
      const auto x = random_vector(k * n, rng);
      const auto dy = random_vector(k * m, rng);
      layer.forward(x.data(), y.data(), k);
      layer.backward(x.data(), y.data(), dy.data(), nullptr, k);
      for (std::size_t i = 0; i < m * n; ++i) expected_dw[i] += grads[i] / static_cast<float>(nodes);
      for (std::size_t i = 0; i < m; ++i) expected_db[i] += grads[m * n + i] / static_cast<float>(nodes);
      u_all.insert(u_all.end(), dy.begin(), dy.end());
      v_all.insert(v_all.end(), x.begin(), x.end());
    }
    std::vector<float> dw(m * n), db(m);
    rebuild_dense_gradient(u_all, v_all, nodes * k, m, n, 1.0f / static_cast<float>(nodes), dw, db);
    float worst = 0;
    for (std::size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::abs(dw[i] - expected_dw[i]));
    for (std::size_t i = 0; i < db.size(); ++i) worst = std::max(worst, std::abs(db[i] - expected_db[i]));
    CHECK(worst <= 1e-5f);
  }
}

TEST_CASE("SF rebuild checks its shapes", "[sync][poseidon][sfb]") {
  std::vector<float> u(6), v(6), dw(4), db(2);
  CHECK_NOTHROW(rebuild_dense_gradient(u, v, 3, 2, 2, 1.0f, dw, db));
  CHECK_THROWS_AS(rebuild_dense_gradient(u, v, 2, 2, 2, 1.0f, dw, db), gradmesh::ContractError);
}

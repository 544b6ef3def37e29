#include "sync/poseidon/sf_rebuild.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tasks/layers/dense.h"
#include "tests/tasks/emulated_device.h"

using gradmesh::sync::rebuild_dense_gradient;

namespace {
std::vector<float> random_vector(std::size_t size, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = dist(rng);
  return v;
}
}  // namespace

TEST_CASE("SF rebuild equals the summed dense gradient for random shapes",
          "[sync][poseidon][sfb]") {
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
      for (std::size_t i = 0; i < m * n; ++i)
        expected_dw[i] += grads[i] / static_cast<float>(nodes);
      for (std::size_t i = 0; i < m; ++i)
        expected_db[i] += grads[m * n + i] / static_cast<float>(nodes);
      u_all.insert(u_all.end(), dy.begin(), dy.end());
      v_all.insert(v_all.end(), x.begin(), x.end());
    }
    std::vector<float> dw(m * n), db(m);
    rebuild_dense_gradient(u_all, v_all, nodes * k, m, n, 1.0f / static_cast<float>(nodes), dw, db);
    float worst = 0;
    for (std::size_t i = 0; i < dw.size(); ++i)
      worst = std::max(worst, std::abs(dw[i] - expected_dw[i]));
    for (std::size_t i = 0; i < db.size(); ++i)
      worst = std::max(worst, std::abs(db[i] - expected_db[i]));
    CHECK(worst <= 1e-5f);
  }
}

TEST_CASE("SF rebuild checks its shapes", "[sync][poseidon][sfb]") {
  std::vector<float> u(6), v(6), dw(4), db(2);
  CHECK_NOTHROW(rebuild_dense_gradient(u, v, 3, 2, 2, 1.0f, dw, db));
  CHECK_THROWS_AS(rebuild_dense_gradient(u, v, 2, 2, 2, 1.0f, dw, db), gradmesh::ContractError);
}

TEST_CASE("SF rebuild on a device backend's memory equals the host form", "[sync][poseidon][sfb]") {
  // The emulated device runs the CPU kernels on its own buffers: the same bits.
  std::mt19937 rng(99);
  const std::size_t rows = 12, m = 7, n = 19;
  const auto u = random_vector(rows * m, rng), v = random_vector(rows * n, rng);
  std::vector<float> dw(m * n), db(m);
  rebuild_dense_gradient(u, v, rows, m, n, 1.0f / 3.0f, dw, db);

  gradmesh::tasks::testing::EmulatedDevice device;
  auto du = device.allocate<float>(u.size()), dv = device.allocate<float>(v.size());
  auto ddw = device.allocate<float>(dw.size()), ddb = device.allocate<float>(db.size());
  device.copy_to_device(du.data(), u.data(), u.size() * sizeof(float));
  device.copy_to_device(dv.data(), v.data(), v.size() * sizeof(float));
  rebuild_dense_gradient(device, du.span(), dv.span(), rows, m, n, 1.0f / 3.0f, ddw.span(),
                         ddb.span());
  std::vector<float> dw_back(dw.size()), db_back(db.size());
  device.copy_to_host(dw_back.data(), ddw.data(), dw.size() * sizeof(float));
  device.copy_to_host(db_back.data(), ddb.data(), db.size() * sizeof(float));
  CHECK(std::memcmp(dw_back.data(), dw.data(), dw.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(db_back.data(), db.data(), db.size() * sizeof(float)) == 0);
}

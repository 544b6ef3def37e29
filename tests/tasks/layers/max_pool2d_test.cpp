#include "tasks/layers/max_pool2d.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {

TEST_CASE("MaxPool2d output shapes and errors", "[tasks][pool]") {
  CHECK(MaxPool2d::output_shape_for({32, 28, 28}, 2, 2) == Shape{32, 14, 14});
  CHECK(MaxPool2d::output_shape_for({1, 7, 7}, 3, 2) == Shape{1, 3, 3});
  CHECK(MaxPool2d::output_shape_for({2, 5, 4}, 2, 2) == Shape{2, 2, 2});  // rounds down
  CHECK_THROWS_WITH(MaxPool2d::output_shape_for({4, 1, 1}, 2, 2),
                    "max_pool2d: expected a window no larger than the input's 1x1 (input 4x1x1), "
                    "got 2x2");
  CHECK_THROWS_AS(MaxPool2d({1, 4, 4}, 0, 1), ConfigError);
  CHECK_THROWS_AS(MaxPool2d({1, 4, 4}, 2, 0), ConfigError);
  const MaxPool2d pool({3, 4, 4}, 2, 2);
  CHECK(pool.kind() == "max_pool2d");
  CHECK(pool.parameter_count() == 0);
}

TEST_CASE("MaxPool2d forward takes each window's maximum, backward routes dy to it",
          "[tasks][pool]") {
  // One 4 x 4 plane, windows of 2, stride 2; and overlapping windows of 3, stride 1.
  const std::vector<float> x = {1, 5, 2, 0,  //
                                3, 4, 8, 1,  //
                                0, 0, 6, 7,  //
                                9, 2, 7, 7};
  MaxPool2d pool({1, 4, 4}, 2, 2);
  pool.reserve(1);
  std::vector<float> y(4), dx(16);
  pool.forward(x.data(), y.data(), 1);
  CHECK(y == std::vector<float>{5, 8, 9, 7});
  const std::vector<float> dy = {1, 2, 3, 4};
  pool.backward(x.data(), y.data(), dy.data(), dx.data(), 1);
  // The tie of 7s in the last window: the first in row-major order wins.
  CHECK(dx == std::vector<float>{0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 3, 0, 0, 0});

  MaxPool2d overlap({1, 4, 4}, 3, 1);
  overlap.reserve(1);
  std::vector<float> y2(4);
  overlap.forward(x.data(), y2.data(), 1);
  CHECK(y2 == std::vector<float>{8, 8, 9, 8});
  overlap.backward(x.data(), y2.data(), dy.data(), dx.data(), 1);
  CHECK(dx[6] == 1 + 2 + 4);  // the 8 is the maximum of three windows: their dy add up
  CHECK(dx[12] == 3);
  CHECK(std::accumulate(dx.begin(), dx.end(), 0.0f) == 10.0f);
  CHECK_THROWS_AS(overlap.forward(x.data(), y2.data(), 2), ContractError);  // reserved for 1
}

TEST_CASE("MaxPool2d input gradient matches finite differences", "[tasks][pool]") {
  // Distinct inputs 0.01 apart, so no step of 1e-3 changes which input is a window's maximum.
  for (const auto& [shape, window, stride] :
       std::vector<std::tuple<Shape, std::size_t, std::size_t>>{
           {{2, 4, 6}, 2, 2}, {{1, 7, 7}, 3, 2}, {{3, 5, 5}, 2, 3}}) {
    MaxPool2d pool(shape, window, stride);
    testing::LayerHarness h(pool, 2, 1);
    std::vector<std::size_t> order(h.x.size());
    std::iota(order.begin(), order.end(), 0);
    SplitMix64 rng(window * 10 + stride);
    fisher_yates_shuffle(std::span<std::size_t>(order), rng);
    for (std::size_t i = 0; i < order.size(); ++i) {
      h.x[i] = 0.01f * (static_cast<float>(order[i]) - static_cast<float>(order.size()) / 2);
    }
    INFO("input " << to_string(shape) << ", window " << window << ", stride " << stride);
    h.check();
  }
}

}  // namespace gradmesh::tasks

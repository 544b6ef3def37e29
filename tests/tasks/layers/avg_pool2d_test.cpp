// Tests for tasks/layers/avg_pool2d.h: average pooling over windows and over whole planes.

#include "tasks/layers/avg_pool2d.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <tuple>
#include <vector>

#include "engine/error.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/layers/make_layer.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {

TEST_CASE("AvgPool2d takes each window's mean, backward spreads dy over it", "[tasks][pool]") {
  const std::vector<float> x = {1, 5, 2, 0,  //
                                3, 4, 8, 1,  //
                                0, 0, 6, 7,  //
                                9, 2, 7, 8};
  AvgPool2d pool({1, 4, 4}, 2, 2);
  CHECK(pool.kind() == "avg_pool2d");
  CHECK(pool.output_shape() == Shape{1, 2, 2});
  CHECK(pool.parameter_count() == 0);
  std::vector<float> y(4), dx(16);
  pool.forward(x.data(), y.data(), 1);
  CHECK(y == std::vector<float>{13.0f / 4, 11.0f / 4, 11.0f / 4, 28.0f / 4});
  const std::vector<float> dy = {4, 8, 12, 16};
  pool.backward(x.data(), y.data(), dy.data(), dx.data(), 1);
  CHECK(dx == std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});

  // Overlapping windows add up; a pixel no window covers (stride 3 over 5) gets 0.
  AvgPool2d overlap({1, 4, 4}, 3, 1);
  std::vector<float> y2(4);
  overlap.forward(x.data(), y2.data(), 1);
  CHECK(y2[0] == Approx((1 + 5 + 2 + 3 + 4 + 8 + 0 + 0 + 6) / 9.0));
  overlap.backward(x.data(), y2.data(), dy.data(), dx.data(), 1);
  CHECK(dx[5] == Approx((4 + 8 + 12 + 16) / 9.0));  // (1, 1): under all four windows
  CHECK(dx[0] == Approx(4 / 9.0));
  CHECK(std::accumulate(dx.begin(), dx.end(), 0.0) == Approx(9 * (4 + 8 + 12 + 16) / 9.0));
  AvgPool2d skip({1, 5, 5}, 2, 3);
  const std::vector<float> ones(4, 1.0f);
  std::vector<float> dx5(25, -1.0f);
  skip.backward(nullptr, nullptr, ones.data(), dx5.data(), 1);
  CHECK(dx5[2] == 0.0f);  // column 2 lies between the windows at 0-1 and 3-4
  CHECK(dx5[0] == 0.25f);

  CHECK_THROWS_WITH(AvgPool2d({4, 1, 1}, 2, 2),
                    "avg_pool2d: expected a window no larger than the input's 1x1 (input 4x1x1), "
                    "got 2x2");
  CHECK_THROWS_AS(AvgPool2d({1, 4, 4}, 0, 1), ConfigError);
}

TEST_CASE("GlobalAvgPool takes each plane's mean, backward spreads dy over the plane",
          "[tasks][pool]") {
  GlobalAvgPool pool({2, 2, 3});
  CHECK(pool.kind() == "global_avg_pool");
  CHECK(pool.output_shape() == Shape::flat(2));
  pool.reserve(2);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6,  -6, 0, 0, 0, 0, 0,  // sample 0: two planes
                                0, 0, 0, 0, 0, 12, 3,  3, 3, 3, 3, 3};
  std::vector<float> y(4), dx(24);
  pool.forward(x.data(), y.data(), 2);
  CHECK(y[0] == Approx(3.5));
  CHECK(y[1] == Approx(-1.0));
  CHECK(y[2] == Approx(2.0));
  CHECK(y[3] == Approx(3.0));
  const std::vector<float> dy = {6, 12, -6, 0};
  pool.backward(x.data(), y.data(), dy.data(), dx.data(), 2);
  for (std::size_t i = 0; i < 24; ++i) {
    INFO(i);
    CHECK(dx[i] == Approx(dy[i / 6] / 6.0));
  }
  CHECK_THROWS_AS(GlobalAvgPool({0, 1, 1}), ConfigError);
  GlobalAvgPool unreserved({1, 2, 2});
  CHECK_THROWS_AS(unreserved.forward(x.data(), y.data(), 1), ContractError);
}

TEST_CASE("average pooling's input gradients match finite differences", "[tasks][pool]") {
  for (const auto& [shape, window, stride] :
       std::vector<std::tuple<Shape, std::size_t, std::size_t>>{
           {{2, 4, 6}, 2, 2}, {{1, 7, 7}, 3, 2}, {{3, 5, 5}, 2, 3}, {{2, 5, 4}, 3, 1}}) {
    INFO("input " << to_string(shape) << ", window " << window << ", stride " << stride);
    AvgPool2d pool(shape, window, stride);
    testing::LayerHarness h(pool, 2, 1);
    h.check();
  }
  for (const Shape shape : {Shape{3, 4, 5}, Shape{1, 1, 1}, Shape{4, 7, 3}}) {
    INFO("global, input " << to_string(shape));
    GlobalAvgPool pool(shape);
    testing::LayerHarness h(pool, 3, 1);
    h.check();
  }
}

TEST_CASE("avg_pool2d and global_avg_pool are made from their specs", "[tasks][pool][spec]") {
  const auto avg = make_layer(parse_layer_spec("avg_pool2d:2"), Shape{8, 6, 6});
  CHECK(avg->kind() == "avg_pool2d");
  CHECK(avg->output_shape() == Shape{8, 3, 3});
  const auto global = make_layer(parse_layer_spec("global_avg_pool"), Shape{64, 8, 8});
  CHECK(global->kind() == "global_avg_pool");
  CHECK(global->output_shape() == Shape::flat(64));
}

}  // namespace gradmesh::tasks

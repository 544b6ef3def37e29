#include "tasks/layers/flatten.h"

#include <catch2/catch.hpp>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {

TEST_CASE("Flatten reshapes C x H x W to C*H*W x 1 x 1 without moving a float",
          "[tasks][flatten]") {
  Flatten flatten({2, 3, 4});
  CHECK(flatten.kind() == "flatten");
  CHECK(flatten.output_shape() == Shape::flat(24));
  CHECK(flatten.parameter_count() == 0);
  const auto x = testing::random_floats(2 * 24, 5);
  std::vector<float> y(x.size()), dx(x.size());
  flatten.forward(x.data(), y.data(), 2);
  CHECK(y == x);  // NCHW is already the flattened order
  flatten.backward(x.data(), y.data(), x.data(), dx.data(), 2);
  CHECK(dx == x);
  CHECK_THROWS_AS(Flatten({0, 1, 1}), ConfigError);
}

TEST_CASE("Flatten input gradient matches finite differences", "[tasks][flatten]") {
  Flatten flatten({3, 2, 2});
  testing::LayerHarness h(flatten, 2, 1);
  h.check();
}

}  // namespace gradmesh::tasks

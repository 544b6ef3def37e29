#include "tasks/data/dataset.h"

#include <catch2/catch.hpp>

#include "engine/error.h"

namespace gradmesh::tasks {

TEST_CASE("validate accepts a consistent data set and names what is wrong", "[tasks][dataset]") {
  Dataset d{2, 3, 4, {0, 1, 2, 3, 4, 5}, {0, 3}};
  CHECK_NOTHROW(validate(d));
  d.y[1] = 4;
  CHECK_THROWS_WITH(validate(d), Catch::Contains("label"));
  d.y[1] = 1;
  d.x.pop_back();
  CHECK_THROWS_AS(validate(d), DataError);
}

TEST_CASE("take_first copies a prefix", "[tasks][dataset]") {
  const Dataset d{3, 2, 10, {0, 1, 2, 3, 4, 5}, {7, 8, 9}};
  const Dataset two = take_first(d, 2);
  CHECK(two.count == 2);
  CHECK(two.features == 2);
  CHECK(two.x == std::vector<float>{0, 1, 2, 3});
  CHECK(two.y == std::vector<std::int32_t>{7, 8});
  CHECK(take_first(d, 99).count == 3);
}

TEST_CASE("a data set's example shape is its own, else flat, and must hold its features",
          "[tasks][dataset]") {
  Dataset d{2, 6, 4, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {0, 3}};
  CHECK(sample_shape(d) == Shape::flat(6));
  d.shape = Shape{1, 2, 3};
  CHECK(sample_shape(d) == Shape{1, 2, 3});
  CHECK_NOTHROW(validate(d));
  CHECK(take_first(d, 1).shape == Shape{1, 2, 3});
  d.shape = Shape{1, 2, 2};
  CHECK_THROWS_WITH(validate(d), Catch::Contains("shape of 6 features, found 1x2x2"));
}

}  // namespace gradmesh::tasks

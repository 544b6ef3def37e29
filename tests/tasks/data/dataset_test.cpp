#include "tasks/data/dataset.h"

#include <catch2/catch.hpp>

#include <cmath>

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

TEST_CASE("standardization fits one mean and standard deviation and maps them to 0 and 1",
          "[tasks][dataset]") {
  Dataset train{2, 2, 10, {1.0f, 3.0f, 5.0f, 7.0f}, {0, 1}};
  const Standardization s = fit_standardization(train);
  CHECK(s.mean == Approx(4.0f));
  CHECK(s.stddev == Approx(std::sqrt(5.0f)));  // population: (9 + 1 + 1 + 9) / 4
  standardize(train, s);
  double sum = 0.0, sum_sq = 0.0;
  for (const float v : train.x) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  CHECK(sum / 4.0 == Approx(0.0).margin(1e-6));
  CHECK(sum_sq / 4.0 == Approx(1.0));
  // The test set is mapped with the training set's pair, not its own.
  Dataset test{1, 2, 10, {4.0f, 4.0f + std::sqrt(5.0f)}, {0}};
  standardize(test, s);
  CHECK(test.x[0] == Approx(0.0f).margin(1e-6));
  CHECK(test.x[1] == Approx(1.0f));

  Dataset flat{2, 1, 10, {0.5f, 0.5f}, {0, 1}};
  CHECK_THROWS_WITH(fit_standardization(flat), Catch::Contains("every feature equals"));
  CHECK_THROWS_AS(fit_standardization(Dataset{}), DataError);
}

}  // namespace gradmesh::tasks

// Tests for tasks/data/synthetic.h: synthetic examples are a pure function of (seed, index), their
// labels cover the classes, and they carry a class signal a model can learn.

#include "tasks/data/synthetic.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "engine/error.h"

using namespace gradmesh;
using tasks::Shape;
using tasks::SyntheticTask;

TEST_CASE("synthetic examples are a function of the seed and the index", "[data][synthetic]") {
  const SyntheticTask a(Shape{3, 4, 5}, 7, 42), b(Shape{3, 4, 5}, 7, 42),
      other(Shape{3, 4, 5}, 7, 43);
  CHECK(a.features() == 60);
  CHECK(a.shape() == Shape{3, 4, 5});
  std::vector<float> x(60), y(60), z(60);
  for (const std::uint64_t index :
       {std::uint64_t{0}, std::uint64_t{17}, tasks::kSyntheticTestBase}) {
    INFO("index " << index);
    a.write(index, x);
    b.write(index, y);
    other.write(index, z);
    CHECK(x == y);  // another instance, the same seed: the same example
    CHECK(x != z);  // another seed: another example
    CHECK(a.label(index) == b.label(index));
    for (float v : x) {
      CHECK(v >= -2.0f);  // a prototype in [-1, 1) plus noise in [-1, 1)
      CHECK(v < 2.0f);
    }
  }
  a.write(1, y);
  CHECK(x != y);  // the examples differ by index
  std::vector<float> wrong(59);
  CHECK_THROWS_AS(a.write(0, wrong), ContractError);
}

TEST_CASE("synthetic labels cover every class, about evenly", "[data][synthetic]") {
  const SyntheticTask task(Shape::flat(8), 10, 7);
  std::vector<int> counts(10, 0);
  for (std::uint64_t i = 0; i < 10'000; ++i) {
    const std::int32_t y = task.label(i);
    REQUIRE(y >= 0);
    REQUIRE(y < 10);
    ++counts[static_cast<std::size_t>(y)];
  }
  // 1,000 expected each; a binomial's standard deviation is 30: 800..1,200 is beyond 6 of them.
  for (int c : counts) {
    CHECK(c > 800);
    CHECK(c < 1200);
  }
}

TEST_CASE("make() holds the examples write() and label() give", "[data][synthetic]") {
  const SyntheticTask task(Shape{1, 6, 6}, 4, 9);
  const tasks::Dataset d = task.make(100, 5);
  CHECK(d.count == 5);
  CHECK(d.features == 36);
  CHECK(d.classes == 4);
  CHECK(d.shape == Shape{1, 6, 6});
  CHECK_NOTHROW(tasks::validate(d));
  std::vector<float> x(36);
  for (std::size_t i = 0; i < 5; ++i) {
    task.write(100 + i, x);
    CHECK(std::equal(x.begin(), x.end(), d.x.begin() + static_cast<std::ptrdiff_t>(i * 36)));
    CHECK(d.y[i] == task.label(100 + i));
  }
}

TEST_CASE("a synthetic example is nearest its own class's mean", "[data][synthetic]") {
  // The class signal: the mean of many examples of a class is its prototype (the noise averages
  // out), and with 64 features every example lies nearer its own class's mean than any other's
  // (distance^2 to its own about 64/3, to another's about 64/3 + 2 x 64/3).
  const SyntheticTask task(Shape::flat(64), 5, 3);
  const tasks::Dataset train = task.make(0, 2000);
  std::vector<double> mean(5 * 64, 0.0);
  std::vector<int> count(5, 0);
  for (std::size_t i = 0; i < train.count; ++i) {
    const auto y = static_cast<std::size_t>(train.y[i]);
    ++count[y];
    for (std::size_t f = 0; f < 64; ++f) mean[y * 64 + f] += train.x[i * 64 + f];
  }
  for (std::size_t c = 0; c < 5; ++c) {
    for (std::size_t f = 0; f < 64; ++f) mean[c * 64 + f] /= count[c];
  }
  const tasks::Dataset test = task.make(tasks::kSyntheticTestBase, 200);
  std::size_t right = 0;
  for (std::size_t i = 0; i < test.count; ++i) {
    std::size_t best = 0;
    double best_distance = INFINITY;
    for (std::size_t c = 0; c < 5; ++c) {
      double distance = 0;
      for (std::size_t f = 0; f < 64; ++f) {
        const double d = test.x[i * 64 + f] - mean[c * 64 + f];
        distance += d * d;
      }
      if (distance < best_distance) best_distance = distance, best = c;
    }
    right += best == static_cast<std::size_t>(test.y[i]) ? 1 : 0;
  }
  CHECK(right == test.count);
}

TEST_CASE("a synthetic task refuses no floats and fewer than 2 classes", "[data][synthetic]") {
  CHECK_THROWS_AS(SyntheticTask(Shape{0, 1, 1}, 10, 1), ConfigError);
  CHECK_THROWS_AS(SyntheticTask(Shape::flat(4), 1, 1), ConfigError);
  CHECK_THROWS_WITH(SyntheticTask(Shape::flat(4), 1, 1), Catch::Contains("at least 2"));
}

#include "tasks/layers/dropout.h"

#include <catch2/catch.hpp>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {
namespace {

/// The mask a fresh Dropout(shape, p) initialised from `seed` draws on its `steps`-th forward.
std::vector<float> mask_after(Shape shape, double p, std::uint64_t seed, std::size_t steps,
                              std::size_t batch) {
  Dropout d(shape, p);
  d.reserve(batch);
  d.initialize(seed);
  const std::vector<float> x(batch * shape.size(), 1.0f);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < steps; ++i) d.forward(x.data(), y.data(), batch);
  return y;
}

}  // namespace

TEST_CASE("Dropout: the same seed gives the same masks, another seed or step other masks",
          "[tasks][dropout]") {
  const Shape shape{4, 5, 5};
  const auto a = mask_after(shape, 0.5, 42, 1, 3);
  CHECK(a == mask_after(shape, 0.5, 42, 1, 3));
  CHECK(a != mask_after(shape, 0.5, 43, 1, 3));
  CHECK(a != mask_after(shape, 0.5, 42, 2, 3));             // each step draws a new mask
  for (const float m : a) CHECK((m == 0.0f || m == 2.0f));  // inverted: kept units x 1 / (1 - p)

  Dropout d(shape, 0.5);
  d.reserve(3);
  d.initialize(42);
  const std::vector<float> ones(3 * shape.size(), 1.0f);
  std::vector<float> y(ones.size());
  d.forward(ones.data(), y.data(), 3);
  CHECK(d.step() == 1);
  d.set_step(0);  // replay step 0
  std::vector<float> again(ones.size());
  d.forward(ones.data(), again.data(), 3);
  CHECK(again == y);
  CHECK(std::equal(y.begin(), y.end(), d.mask(3).begin()));
}

TEST_CASE("Dropout keeps a fraction near 1 - p and preserves the mean", "[tasks][dropout]") {
  for (const double p : {0.1, 0.5, 0.8}) {
    const std::size_t n = 100000;
    const auto y = mask_after(Shape::flat(n), p, 7, 1, 1);
    const auto kept =
        static_cast<double>(std::count_if(y.begin(), y.end(), [](float v) { return v != 0.0f; })) /
        n;
    double mean = 0;
    for (const float v : y) mean += v;
    mean /= n;
    INFO("p = " << p << ": kept " << kept << ", mean " << mean);
    // Binomial standard deviation sqrt(p (1 - p) / n) <= 0.0016: 0.01 is over 6 of them.
    CHECK(std::abs(kept - (1.0 - p)) < 0.01);
    CHECK(std::abs(mean - 1.0) < 0.05);
  }
}

TEST_CASE("Dropout is the identity in evaluation mode and with p = 0", "[tasks][dropout]") {
  const auto x = testing::random_floats(2 * 12, 3);
  std::vector<float> y(x.size()), dx(x.size());
  Dropout d(Shape{3, 2, 2}, 0.6);
  d.reserve(2);
  d.initialize(1);
  d.set_training(false);
  d.forward(x.data(), y.data(), 2);
  CHECK(y == x);
  CHECK(d.step() == 0);  // evaluation draws no mask
  d.backward(x.data(), y.data(), x.data(), dx.data(), 2);
  CHECK(dx == x);
  Dropout none(Shape{3, 2, 2}, 0.0);
  none.reserve(2);
  none.initialize(1);
  none.forward(x.data(), y.data(), 2);
  CHECK(y == x);
  CHECK_THROWS_AS(Dropout(Shape::flat(4), 1.0), ConfigError);
  CHECK_THROWS_AS(Dropout(Shape::flat(4), -0.1), ConfigError);
  CHECK_THROWS_AS(d.forward(x.data(), y.data(), 3), ContractError);  // reserved for 2
}

TEST_CASE("Dropout input gradient matches finite differences with a fixed mask",
          "[tasks][dropout]") {
  Dropout d(Shape{2, 3, 3}, 0.3);
  testing::LayerHarness h(d, 3, 9);
  h.before_forward = [&d] { d.set_step(0); };  // every forward draws mask 0
  h.check();
  const auto mask = d.mask(3);
  CHECK(std::count(mask.begin(), mask.end(), 0.0f) > 0);  // some units really were dropped
}

}  // namespace gradmesh::tasks

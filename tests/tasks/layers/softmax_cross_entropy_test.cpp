#include "tasks/layers/softmax_cross_entropy.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {

TEST_CASE("softmax cross-entropy of a hand example", "[tasks][loss]") {
  // Row 0: equal logits over 4 classes -> softmax 1/4 each, loss ln 4 (label 2, argmax 0: wrong).
  // Row 1: logits (0, 0, 0, ln 3) -> softmax (1, 1, 1, 3) / 6, loss -ln(1/2) = ln 2 (right).
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, std::log(3.0f)};
  const std::vector<std::int32_t> labels = {2, 3};
  std::vector<float> d(8);
  const float loss =
      SoftmaxCrossEntropy::forward_backward(logits.data(), labels.data(), 2, 4, d.data());
  const double expected = (std::log(4.0) + std::log(2.0)) / 2.0;
  CHECK(loss == Approx(expected).epsilon(1e-6));
  CHECK(SoftmaxCrossEntropy::loss(logits.data(), labels.data(), 2, 4) == Approx(expected));
  CHECK(d[0] == Approx(0.25 / 2));
  CHECK(d[2] == Approx((0.25 - 1.0) / 2));
  CHECK(d[7] == Approx((0.5 - 1.0) / 2));
  CHECK(SoftmaxCrossEntropy::count_correct(logits.data(), labels.data(), 2, 4) == 1);
}

TEST_CASE("softmax cross-entropy is stable for huge logits", "[tasks][loss]") {
  const std::vector<float> logits = {1e30f, 0.0f, -1e30f, 1000.0f, 1001.0f, 999.0f};
  const std::vector<std::int32_t> labels = {0, 1};
  std::vector<float> d(6);
  const float loss =
      SoftmaxCrossEntropy::forward_backward(logits.data(), labels.data(), 2, 3, d.data());
  CHECK(std::isfinite(loss));
  for (const float v : d) CHECK(std::isfinite(v));
}

TEST_CASE("softmax cross-entropy gradient matches finite differences", "[tasks][loss]") {
  constexpr std::size_t kBatch = 3, kClasses = 5;
  auto logits = testing::random_floats(kBatch * kClasses, 31, -3.0f, 3.0f);
  const std::vector<std::int32_t> labels = {4, 0, 2};
  std::vector<float> d(logits.size());
  SoftmaxCrossEntropy::forward_backward(logits.data(), labels.data(), kBatch, kClasses, d.data());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double numeric = testing::central_difference(logits[i], [&] {
      return static_cast<double>(
          SoftmaxCrossEntropy::loss(logits.data(), labels.data(), kBatch, kClasses));
    });
    INFO("logit " << i << " analytic " << d[i] << " numeric " << numeric);
    CHECK(testing::gradients_agree(d[i], numeric));
  }
}

TEST_CASE("softmax cross-entropy rejects labels out of range", "[tasks][loss]") {
  const std::vector<float> logits = {0.0f, 1.0f};
  const std::vector<std::int32_t> labels = {2};
  CHECK_THROWS_AS(SoftmaxCrossEntropy::loss(logits.data(), labels.data(), 1, 2), ContractError);
}

}  // namespace gradmesh::tasks

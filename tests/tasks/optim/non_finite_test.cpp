// Tests for tasks/optim/non_finite.h and the optimizer's non-finite guard (issue 59): the checks
// fused into the update loops find a NaN or an Inf wherever it is, name the range, and change no
// value the step writes.

#include "tasks/optim/non_finite.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tasks/optim/adam.h"
#include "tasks/optim/optimizer.h"
#include "tasks/optim/sgd.h"

using namespace gradmesh::tasks;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  return v;
}

}  // namespace

TEST_CASE("all_finite and copy_finite find one NaN or Inf at any index, and copy every float") {
  for (const float bad : {kNaN, -kNaN, kInf, -kInf}) {
    for (const std::size_t n : {1u, 7u, 64u, 1001u}) {
      for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
        std::vector<float> v = ramp(n);
        CHECK(all_finite(v));
        v[at] = bad;
        CHECK_FALSE(all_finite(v));
        std::vector<float> out(n, 5.0f);
        CHECK_FALSE(copy_finite(v, out));
        CHECK(std::memcmp(out.data(), v.data(), n * sizeof(float)) == 0);
      }
    }
  }
  // The largest finite values and the subnormals are finite.
  const std::vector<float> edge{std::numeric_limits<float>::max(),
                                -std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::denorm_min(), -0.0f};
  CHECK(all_finite(edge));
  std::vector<float> out(edge.size());
  CHECK(copy_finite(edge, out));
  CHECK(all_finite(std::vector<float>{}));
}

TEST_CASE("NonFiniteGuard keeps the first report and counts its NaN and Inf") {
  NonFiniteGuard guard;
  CHECK_FALSE(guard.tripped());
  CHECK_FALSE(guard.first().has_value());
  const std::vector<float> first{1, kNaN, kInf, -kInf, kNaN, 2};
  guard.report(10, first, "the summed gradient");
  guard.report(99, std::vector<float>{kNaN}, "a later one");
  REQUIRE(guard.tripped());
  const auto found = guard.first();
  REQUIRE(found.has_value());
  CHECK(found->offset == 10);
  CHECK(found->size == 6);
  CHECK(found->nan == 2);
  CHECK(found->inf == 2);
  CHECK(found->what == "the summed gradient");
}

TEST_CASE("sgd_update and adam_update write the same bits with and without the check") {
  const std::size_t n = 1003;
  const std::vector<float> g = ramp(n);
  std::vector<float> w1 = ramp(n), w2 = w1, v1(n, 0.1f), v2 = v1, m1(n, 0.0f), m2 = m1;
  const SgdOptions o{0.05f, 0.9f, 1e-4f};
  CHECK(sgd_update(w1.data(), g.data(), v1.data(), n, o, /*check_finite=*/true));
  CHECK(sgd_update(w2.data(), g.data(), v2.data(), n, o, /*check_finite=*/false));
  CHECK(std::memcmp(w1.data(), w2.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(v1.data(), v2.data(), n * sizeof(float)) == 0);
  const AdamOptions a;
  const AdamStep s = adam_step_scalars(a, 3, 0.001f, 0.01f);
  std::fill(v1.begin(), v1.end(), 0.01f);  // Adam's second moment (>= 0)
  v2 = v1;
  CHECK(adam_update(w1.data(), g.data(), m1.data(), v1.data(), n, a, s, true));
  CHECK(adam_update(w2.data(), g.data(), m2.data(), v2.data(), n, a, s, false));
  CHECK(std::memcmp(w1.data(), w2.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(m1.data(), m2.data(), n * sizeof(float)) == 0);
  // A NaN in the gradient: found when checked, not when not.
  std::vector<float> bad = g;
  bad[517] = kNaN;
  CHECK_FALSE(sgd_update(w1.data(), bad.data(), v1.data(), n, o, true));
  CHECK(sgd_update(w2.data(), bad.data(), v2.data(), n, o, false));
  CHECK_FALSE(adam_update(w1.data(), bad.data(), m1.data(), v1.data(), n, a, s, true));
}

TEST_CASE("Optimizer reports the range of a non-finite summed gradient or an overflowed update") {
  SECTION("a NaN in one node's gradient, summed: step_sum names the range and the gradient") {
    Optimizer optimizer(SgdOptions{0.1f, 0.9f, 0.0f}, 100);
    std::vector<float> w(20, 1.0f), scratch(20);
    std::vector<float> a(20, 0.5f), b(20, 0.25f);
    b[3] = kNaN;
    const std::vector<std::span<const float>> grads{a, b};
    optimizer.step_sum(40, w, grads, 0.5f, scratch);
    REQUIRE(optimizer.non_finite().tripped());
    const auto found = optimizer.non_finite().first();
    CHECK(found->offset == 40);
    CHECK(found->size == 20);
    CHECK(found->nan == 1);
    CHECK(found->inf == 0);
    CHECK(found->what == "the summed gradient");
  }
  SECTION("an overflow of finite values: the parameters after the step") {
    Optimizer optimizer(SgdOptions{1e30f, 0.0f, 0.0f}, 8);
    std::vector<float> w(8, 1.0f), g(8, 1e20f);
    optimizer.step(0, w, g);
    const auto found = optimizer.non_finite().first();
    REQUIRE(found.has_value());
    CHECK(found->inf == 8);
    CHECK(found->what.starts_with("the parameters after the step"));
  }
  SECTION("weight decay exemptions split the step; the whole range is reported") {
    Optimizer optimizer(SgdOptions{0.1f, 0.9f, 0.01f}, 10);
    optimizer.exempt_from_weight_decay({{2, 3}});
    std::vector<float> w(10, 1.0f), g(10, 0.5f);
    g[9] = -kInf;
    optimizer.step(0, w, g);
    const auto found = optimizer.non_finite().first();
    REQUIRE(found.has_value());
    CHECK(found->offset == 0);
    CHECK(found->size == 10);
    CHECK(found->inf == 1);
  }
  SECTION("Adam") {
    Optimizer optimizer(SgdOptions{0.001f, 0.9f, 0.0f}, 4, AdamOptions{});
    std::vector<float> w(4, 1.0f), g{0.1f, kNaN, 0.2f, 0.3f};
    optimizer.step(0, w, g);
    const auto found = optimizer.non_finite().first();
    REQUIRE(found.has_value());
    CHECK(found->nan == 1);
  }
  SECTION("off: nothing is checked, the step is the same") {
    Optimizer optimizer(SgdOptions{0.1f, 0.9f, 0.0f}, 4);
    optimizer.set_non_finite_check(false);
    CHECK_FALSE(optimizer.non_finite_check());
    std::vector<float> w(4, 1.0f), g{0.1f, kNaN, 0.2f, 0.3f};
    optimizer.step(0, w, g);
    CHECK_FALSE(optimizer.non_finite().tripped());
    CHECK(std::isnan(w[1]));
  }
  SECTION("finite steps report nothing") {
    Optimizer optimizer(SgdOptions{0.1f, 0.9f, 1e-4f}, 1003);
    std::vector<float> w = ramp(1003);
    const std::vector<float> g = ramp(1003);
    for (int i = 0; i < 5; ++i) optimizer.step(0, w, g);
    CHECK_FALSE(optimizer.non_finite().tripped());
  }
}

// Tests for tasks/optim/lr_schedule.h: the rate of each iteration.

#include "tasks/optim/lr_schedule.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>

#include "engine/error.h"

using namespace gradmesh::tasks;

TEST_CASE("LrSchedule: constant gives lr at every iteration", "[optim][schedule]") {
  const LrSchedule s{LrScheduleKind::kConstant, 0.05f, 100};
  CHECK(s.at(0) == 0.05f);
  CHECK(s.at(57) == 0.05f);
  CHECK(s.at(1000) == 0.05f);
}

TEST_CASE("LrSchedule: cosine anneals from lr to 0 over the job", "[optim][schedule]") {
  const LrSchedule s{LrScheduleKind::kCosine, 0.08f, 1000};
  CHECK(s.at(0) == 0.08f);
  CHECK(s.at(500) == Approx(0.04f).epsilon(1e-6));  // half way: lr / 2
  CHECK(s.at(250) == Approx(0.08 * 0.5 * (1 + std::cos(std::numbers::pi / 4))).epsilon(1e-6));
  CHECK(s.at(999) > 0.0f);  // the last step still moves
  CHECK(s.at(999) < 1e-6f);
  CHECK(s.at(1000) == 0.0f);
  float previous = s.at(0);
  for (std::uint64_t t = 1; t < 1000; ++t) {  // never rises
    CHECK(s.at(t) <= previous);
    previous = s.at(t);
  }
}

TEST_CASE("LrSchedule: names parse, anything else names the key", "[optim][schedule]") {
  CHECK(parse_lr_schedule("constant") == LrScheduleKind::kConstant);
  CHECK(parse_lr_schedule("cosine") == LrScheduleKind::kCosine);
  CHECK_THROWS_AS(parse_lr_schedule("step"), gradmesh::ConfigError);
  CHECK_THROWS_WITH(parse_lr_schedule("step"),
                    Catch::Contains("optimizer.schedule") && Catch::Contains("constant, cosine"));
}

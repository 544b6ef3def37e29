// Tests for net/lane_scheduler.h: start-time fair queuing over lanes, as a pure piece.

#include "net/lane_scheduler.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/error.h"

using namespace gradmesh::net;
using gradmesh::ConfigError;

namespace {

// One choice among `backlogged` lanes, as the send queue makes it: the least virtual time wins,
// ties to the lower lane id. Charges `bytes` to the winner and returns it.
std::size_t serve(LaneScheduler& scheduler, const std::vector<std::size_t>& backlogged,
                  std::size_t bytes) {
  scheduler.begin_choice();
  for (const std::size_t lane : backlogged) scheduler.offer(lane);
  scheduler.settle();
  std::size_t best = backlogged.front();
  for (const std::size_t lane : backlogged)
    if (scheduler.virtual_time(lane) < scheduler.virtual_time(best)) best = lane;
  scheduler.charge(best, bytes);
  return best;
}

}  // namespace

TEST_CASE("lane weights are checked: finite, >= 0, one per lane at most", "[net][schedule]") {
  CHECK_NOTHROW(check_lane_weights(std::vector<double>{}, 2));
  CHECK_NOTHROW(check_lane_weights(std::vector<double>{0.0, 3.5}, 2));
  CHECK_THROWS_WITH(check_lane_weights(std::vector<double>{1.0, -0.5}, 2),
                    Catch::Contains("lane weight [1] = -0.5") &&
                        Catch::Contains("expected a finite number >= 0"));
  CHECK_THROWS_AS(check_lane_weights(std::vector<double>{1.0, -0.5}, 2), ConfigError);
  CHECK_THROWS_WITH(
      check_lane_weights(std::vector<double>{std::numeric_limits<double>::quiet_NaN()}, 2),
      Catch::Contains("lane weight [0] = nan"));
  CHECK_THROWS_AS(
      check_lane_weights(std::vector<double>{std::numeric_limits<double>::infinity()}, 2),
      ConfigError);
  CHECK_THROWS_WITH(check_lane_weights(std::vector<double>{1.0, 1.0, 1.0}, 2),
                    Catch::Contains("3 lane weights for 2 lanes"));
}

TEST_CASE("a weight of 0 or a missing one is 1", "[net][schedule]") {
  LaneScheduler scheduler(4);
  scheduler.set_weights(std::vector<double>{0.0, 2.5});
  CHECK(scheduler.lanes() == 4);
  CHECK(scheduler.weight(0) == 1.0);
  CHECK(scheduler.weight(1) == 2.5);
  CHECK(scheduler.weight(2) == 1.0);
  CHECK(scheduler.weight(3) == 1.0);
  scheduler.charge(1, 1000);
  CHECK(scheduler.virtual_time(1) == Approx(400.0));
}

TEST_CASE("two backlogged lanes of weights 2:1 get bytes 2:1", "[net][schedule]") {
  LaneScheduler scheduler(3);
  scheduler.set_weights(std::vector<double>{2.0, 1.0});
  std::vector<std::size_t> bytes(3, 0);
  for (int i = 0; i < 3000; ++i) bytes[serve(scheduler, {0, 1}, 1000)] += 1000;
  CHECK(bytes[0] == 2000 * 1000);
  CHECK(bytes[1] == 1000 * 1000);
  // At every moment, not only on average: start-time fair queuing keeps the lag within a slice.
  std::vector<std::size_t> run(3, 0);
  for (int i = 0; i < 30; ++i) run[serve(scheduler, {0, 1}, 1000)] += 1;
  CHECK(run[0] == 20);
  CHECK(run[1] == 10);
}

TEST_CASE("a lane alone is served whatever its weight (work-conserving)", "[net][schedule]") {
  LaneScheduler scheduler(2);
  scheduler.set_weights(std::vector<double>{100.0, 0.01});
  for (int i = 0; i < 100; ++i) CHECK(serve(scheduler, {1}, 65536) == 1);
}

TEST_CASE("a newly backlogged lane banks no credit", "[net][schedule]") {
  LaneScheduler scheduler(3);  // equal weights
  // Lane 0 alone for a while: its virtual time runs ahead of idle lane 1's.
  for (int i = 0; i < 1000; ++i) serve(scheduler, {0}, 1000);
  REQUIRE(scheduler.virtual_time(0) == Approx(1e6));
  // Lane 1 joins: from here the two alternate; lane 1 does not get 1000 turns in a row.
  std::vector<std::size_t> count(3, 0);
  std::size_t longest_run = 0, run = 0, last = 3;
  for (int i = 0; i < 200; ++i) {
    const std::size_t lane = serve(scheduler, {0, 1}, 1000);
    ++count[lane];
    run = lane == last ? run + 1 : 1;
    last = lane;
    longest_run = std::max(longest_run, run);
  }
  CHECK(count[0] == 100);
  CHECK(count[1] == 100);
  CHECK(longest_run <= 2);

  // After an idle period of every lane, the first to come back starts at the system virtual
  // time, not at its own old (lower) one: lane 2 has never run.
  scheduler.begin_choice();
  scheduler.settle();  // nothing backlogged
  std::vector<std::size_t> later(3, 0);
  for (int i = 0; i < 100; ++i) ++later[serve(scheduler, {1, 2}, 1000)];
  CHECK(later[1] == 50);
  CHECK(later[2] == 50);
}

TEST_CASE("a lane that stays backlogged keeps its place across choices", "[net][schedule]") {
  // Weight 3:1 with ~64 KiB slices, as the TCP send queue charges them: lane 0 gets 3 slices
  // per slice of lane 1 over every window of 4 (65535 bytes: a multiple of 3, exact sums).
  LaneScheduler scheduler(2);
  scheduler.set_weights(std::vector<double>{3.0, 1.0});
  std::vector<std::size_t> slices(2, 0);
  for (int i = 0; i < 400; ++i) {
    ++slices[serve(scheduler, {0, 1}, 65535)];
    if (i % 4 == 3) CHECK(slices[0] == 3 * slices[1]);
  }
}

TEST_CASE("virtual times stay small over a long run and keep their order", "[net][schedule]") {
  LaneScheduler scheduler(2);
  scheduler.set_weights(std::vector<double>{1e-6, 1.0});      // 1 byte of lane 0 = 1e6 units
  for (int i = 0; i < 40; ++i) serve(scheduler, {0}, 65536);  // 2.6e12 units: rebased
  CHECK(scheduler.virtual_time(0) < 2 * 1099511627776.0);     // at most 2^40 + one charge
  // Lane 1 joins at the system virtual time: both are served, lane 0 at its tiny weight.
  std::vector<std::size_t> count(2, 0);
  for (int i = 0; i < 100; ++i) ++count[serve(scheduler, {0, 1}, 65536)];
  CHECK(count[1] >= 98);
  CHECK(count[0] >= 1);
  CHECK(std::isfinite(scheduler.virtual_time(0)));
}

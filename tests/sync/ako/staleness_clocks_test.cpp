// Ako's staleness bound (SoCC'16 sec. 3.3; Algorithm 1 lines 3, 11, 14), driven through a small
// Executor graph whose gate task defers like AkoStage's ako_gate.

#include "sync/ako/staleness_clocks.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/executor.h"

using gradmesh::engine::Arena;
using gradmesh::engine::Executor;
using gradmesh::engine::Graph;
using gradmesh::engine::TaskContext;
using gradmesh::sync::ako::StalenessClocks;
using namespace std::chrono_literals;

namespace {

/// An iteration graph: gate (deferred on the clocks) -> work (ticks the local clock, line 11).
struct Iterations {
  explicit Iterations(StalenessClocks& clocks) {
    auto gate = graph.emplace("gate", Arena::kCompute, [&clocks, this](TaskContext& ctx) {
      clocks.await(local.load(), ctx.defer());
    });
    auto work = graph.emplace("work", Arena::kCompute, [this](TaskContext&) { ++local; });
    gate.precede(work);
  }
  Graph graph;
  std::atomic<std::uint64_t> local{0};
};

/// Waits until `condition` holds, at most `limit`.
template <class F>
bool eventually(F condition, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("a node blocks at c_j = min s + p + tau + 1 and resumes when the slow peer catches up",
          "[ako][staleness]") {
  Executor ex;
  StalenessClocks clocks(3, 0);  // this node is rank 0; peers 1 and 2
  const std::uint64_t p = 2, tau = 1;
  clocks.set_slack(p + tau);
  clocks.advance(1, 100);  // peer 1 is far ahead; peer 2 is held back at 0
  Iterations it(clocks);

  // c_j = 0..3 satisfy c_j <= 0 + 3: four iterations run.
  for (int i = 0; i < 4; ++i) ex.run(it.graph);
  CHECK(it.local == 4);
  CHECK_FALSE(clocks.blocked());

  // The fifth (c_j = 4 > 3) blocks without holding a thread.
  auto fifth = std::async(std::launch::async, [&] { ex.run(it.graph); });
  REQUIRE(eventually([&] { return clocks.blocked(); }));
  CHECK(fifth.wait_for(100ms) == std::future_status::timeout);
  CHECK(it.local == 4);

  // Peer 2's partition of round 1 arrives on another thread (the loop thread): resume.
  std::thread([&] { clocks.advance(2, 1); }).join();
  REQUIRE(fifth.wait_for(5s) == std::future_status::ready);
  fifth.get();
  CHECK(it.local == 5);
  CHECK(clocks.waits() == 1);
  CHECK(clocks.slowest() == 1u);
  CHECK(clocks.clock(1) == 100);
  clocks.advance(1, 50);  // clocks never go back
  CHECK(clocks.clock(1) == 100);
}

TEST_CASE("before p is agreed there is no slack: the gate waits for set_slack",
          "[ako][staleness]") {
  Executor ex;
  StalenessClocks clocks(2, 1);
  Iterations it(clocks);
  auto first = std::async(std::launch::async, [&] { ex.run(it.graph); });
  REQUIRE(eventually([&] { return clocks.blocked(); }));
  clocks.set_slack(4);
  REQUIRE(first.wait_for(5s) == std::future_status::ready);
  first.get();
  CHECK(it.local == 1);
}

TEST_CASE("a peer failure fails the waiting gate and every later one with the PeerError",
          "[ako][staleness][failure]") {
  Executor ex;
  StalenessClocks clocks(2, 0);
  clocks.set_slack(0);
  Iterations it(clocks);
  ex.run(it.graph);  // c_j = 0 <= 0
  auto blocked = std::async(std::launch::async, [&] { ex.run(it.graph); });
  REQUIRE(eventually([&] { return clocks.blocked(); }));
  std::thread([&] {
    clocks.fail_all(std::make_exception_ptr(gradmesh::PeerError(1, "127.0.0.1:1", "gone")));
  }).join();
  REQUIRE(blocked.wait_for(5s) == std::future_status::ready);
  CHECK_THROWS_AS(blocked.get(), gradmesh::PeerError);
  CHECK_THROWS_AS(ex.run(it.graph), gradmesh::PeerError);  // later gates fail at once
  CHECK(it.local == 1);
}

TEST_CASE("a dropped (failed) peer leaves the bound: the waiting gate opens, the rest still bind",
          "[ako][staleness][failure]") {
  // Ako SoCC'16 sec. 4.3: the survivors go on without the failed peer.
  Executor ex;
  StalenessClocks clocks(3, 0);
  clocks.set_slack(1);
  clocks.advance(1, 10);  // peer 1 ahead; peer 2 (about to fail) at 0
  Iterations it(clocks);
  for (int i = 0; i < 2; ++i) ex.run(it.graph);  // c_j = 0, 1 <= 0 + 1
  auto blocked = std::async(std::launch::async, [&] { ex.run(it.graph); });
  REQUIRE(eventually([&] { return clocks.blocked(); }));
  std::thread([&] { clocks.drop(2); }).join();  // the loop thread hears of the failure
  REQUIRE(blocked.wait_for(5s) == std::future_status::ready);
  blocked.get();
  CHECK(clocks.slowest() == 10u);  // only peer 1 counts now
  // Peer 1 still binds: c_j = 3..11 run, c_j = 12 > 10 + 1 waits for it.
  for (int i = 0; i < 9; ++i) ex.run(it.graph);
  CHECK(it.local == 12);
  auto next = std::async(std::launch::async, [&] { ex.run(it.graph); });
  REQUIRE(eventually([&] { return clocks.blocked(); }));
  clocks.drop(2);  // idempotent
  CHECK(next.wait_for(100ms) == std::future_status::timeout);
  clocks.drop(1);  // no live peer left: never bounded
  REQUIRE(next.wait_for(5s) == std::future_status::ready);
  next.get();
  CHECK_FALSE(clocks.slowest().has_value());
  CHECK_THROWS_AS(clocks.drop(0), gradmesh::ContractError);  // this node's own rank
}

TEST_CASE("a node without peers is never bounded", "[ako][staleness]") {
  Executor ex;
  StalenessClocks clocks(1, 0);
  clocks.set_slack(0);
  Iterations it(clocks);
  for (int i = 0; i < 5; ++i) ex.run(it.graph);
  CHECK(it.local == 5);
  CHECK_THROWS_AS(clocks.advance(0, 1), gradmesh::ContractError);
}

// Tests for sync/collective/latch.h: a deferred task parked on the latch, completed or failed.

#include "sync/collective/latch.h"

#include <catch2/catch.hpp>
#include <functional>
#include <stdexcept>

#include "engine/error.h"
#include "engine/executor.h"
#include "engine/graph.h"

using namespace gradmesh;
using sync::collective::CompletionLatch;
using sync::collective::Settlement;

namespace {

// Runs one deferred task that hands its completion to `park`, then `after` (the owner's later
// event), and a successor that records that it ran. Rethrows the task's error.
bool run_parked(const std::function<Settlement(engine::Completion)>& park,
                const std::function<Settlement()>& after) {
  engine::Executor executor({1, 1});
  engine::Graph graph;
  bool next_ran = false;
  auto wait = graph.emplace("wait", engine::Arena::kNetwork, [&](engine::TaskContext& t) {
    park(t.defer()).run();
    after().run();
  });
  auto next = graph.emplace("next", engine::Arena::kCompute,
                            [&](engine::TaskContext&) { next_ran = true; });
  wait.precede(next);
  executor.run(graph);
  return next_ran;
}

}  // namespace

TEST_CASE("a latch completes at once when ready, or on release", "[sync][collective]") {
  CompletionLatch latch;
  CHECK(run_parked([&](engine::Completion c) { return latch.wait(std::move(c), true); },
                   [] { return Settlement{}; }));
  CHECK_FALSE(latch.waiting());
  CHECK(run_parked(
      [&](engine::Completion c) {
        Settlement s = latch.wait(std::move(c), false);
        CHECK_FALSE(s.pending());
        CHECK(latch.waiting());
        return s;
      },
      [&] { return latch.release(); }));
  CHECK_FALSE(latch.waiting());
  CHECK_FALSE(latch.release().pending());  // nothing parked: nothing to do
}

TEST_CASE("a failed latch fails the parked and every later wait, first error wins",
          "[sync][collective]") {
  CompletionLatch latch;
  CHECK_THROWS_WITH(
      run_parked([&](engine::Completion c) { return latch.wait(std::move(c), false); },
                 [&] { return latch.fail(std::make_exception_ptr(std::runtime_error("first"))); }),
      "first");
  Settlement second = latch.fail(std::make_exception_ptr(std::runtime_error("second")));
  CHECK_FALSE(second.pending());
  CHECK(latch.failed());
  // Ready or not, a later wait fails with the first error; so does a release.
  CHECK_THROWS_WITH(run_parked([&](engine::Completion c) { return latch.wait(std::move(c), true); },
                               [] { return Settlement{}; }),
                    "first");
  CHECK_THROWS_WITH(
      run_parked([&](engine::Completion c) { return latch.wait(std::move(c), false); },
                 [] { return Settlement{}; }),
      "first");
}

TEST_CASE("a latch holds one parked task", "[sync][collective]") {
  CompletionLatch latch;
  engine::Executor executor({1, 1});
  engine::Graph graph;
  graph.emplace("two", engine::Arena::kNetwork, [&](engine::TaskContext& t) {
    Settlement first = latch.wait(t.defer(), false);
    CHECK_THROWS_AS((void)latch.wait(engine::Completion{}, false), ContractError);
    latch.release().run();
  });
  executor.run(graph);
}

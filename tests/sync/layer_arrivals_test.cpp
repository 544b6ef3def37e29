#include "sync/layer_arrivals.h"

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/executor.h"

using gradmesh::engine::Arena;
using gradmesh::engine::Executor;
using gradmesh::engine::Graph;
using gradmesh::engine::TaskContext;
using gradmesh::sync::LayerArrivals;

TEST_CASE("a layer's waiting task ends when its last part arrives", "[sync][arrivals]") {
  Executor ex;
  LayerArrivals arrivals(2);
  Graph g;
  std::atomic<bool> after{false};
  std::thread sender;
  auto open = g.emplace("open", Arena::kNetwork, [&](TaskContext& ctx) {
    arrivals.expect(1, ctx.run(), 3);
    sender = std::thread([&arrivals, run = ctx.run()] {
      for (int i = 0; i < 3; ++i) CHECK(arrivals.arrive(1, run));
      CHECK_FALSE(arrivals.arrive(1, run));  // a fourth part was not expected
    });
  });
  auto wait = g.emplace("wait", Arena::kNetwork,
                        [&](TaskContext& ctx) { arrivals.await(1, ctx.run(), ctx.defer()); });
  auto next = g.emplace("next", Arena::kCompute, [&](TaskContext&) { after = true; });
  open.precede(wait);
  wait.precede(next);
  ex.run(g);
  sender.join();
  CHECK(after);
  CHECK_FALSE(arrivals.arrive(1, 7));  // a round that is not open
  CHECK_FALSE(arrivals.arrive(5, 0));  // no such layer
}

TEST_CASE("a failure fails the waiting task and every later one", "[sync][arrivals]") {
  Executor ex;
  LayerArrivals arrivals(1);
  Graph g;
  std::thread failer;
  g.emplace("wait", Arena::kNetwork, [&](TaskContext& ctx) {
    arrivals.expect(0, ctx.run(), 1);
    arrivals.await(0, ctx.run(), ctx.defer());
    failer = std::thread([&arrivals] {
      arrivals.fail_all(std::make_exception_ptr(std::runtime_error("peer rank 2 (h:1) vanished")));
    });
  });
  CHECK_THROWS_WITH(ex.run(g), "peer rank 2 (h:1) vanished");
  failer.join();
  CHECK_THROWS_WITH(ex.run(g), "peer rank 2 (h:1) vanished");  // fails at once: already failed
  failer.join();
}

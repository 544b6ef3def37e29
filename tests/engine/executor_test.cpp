#include "engine/executor.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using gradmesh::engine::Arena;
using gradmesh::engine::Completion;
using gradmesh::engine::Executor;
using gradmesh::engine::Graph;
using gradmesh::engine::TaskContext;

namespace {
// Spins until `flag` is set or `limit` passes; returns whether it was set.
bool wait_for(const std::atomic<bool>& flag, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}
}  // namespace

TEST_CASE("executor respects dependencies in every run", "[engine][executor]") {
  Executor ex({2, 1});
  Graph g;
  std::mutex m;
  std::vector<std::string> order;
  auto log = [&](std::string s) {
    std::lock_guard lock(m);
    order.push_back(std::move(s));
  };
  auto a = g.emplace("a", Arena::kCompute, [&](TaskContext&) { log("a"); });
  auto b = g.emplace("b", Arena::kNetwork, [&](TaskContext&) { log("b"); });
  auto c = g.emplace("c", Arena::kCompute, [&](TaskContext&) { log("c"); });
  auto d = g.emplace("d", Arena::kCompute, [&](TaskContext&) { log("d"); });
  a.precede(b);
  a.precede(c);
  b.precede(d);
  c.precede(d);
  for (int run = 0; run < 50; ++run) {
    order.clear();
    ex.run(g);
    REQUIRE(order.size() == 4);
    CHECK(order.front() == "a");
    CHECK(order.back() == "d");
  }
  CHECK(g.runs() == 50);
}

TEST_CASE("a network task runs while a compute task is busy", "[engine][executor]") {
  // The compute task cannot finish until the network task has run: only possible if the two
  // arenas have their own threads (the property WFBP needs).
  Executor ex({1, 1});
  Graph g;
  std::atomic<bool> network_ran{false};
  bool compute_saw_it = false;
  auto start = g.emplace("start", Arena::kCompute, [](TaskContext&) {});
  auto busy = g.emplace("busy", Arena::kCompute,
                        [&](TaskContext&) { compute_saw_it = wait_for(network_ran, 5000ms); });
  auto net = g.emplace("net", Arena::kNetwork, [&](TaskContext&) { network_ran = true; });
  start.precede(busy);
  start.precede(net);
  ex.run(g);
  CHECK(compute_saw_it);
}

TEST_CASE("stateful tasks keep state across runs and see the run index", "[engine][executor]") {
  struct Sum {
    std::uint64_t total = 0;
    std::uint64_t last_run = 0;
  };
  Executor ex;
  Graph g;
  auto t = g.emplace_stateful("sum", Arena::kCompute, Sum{}, [](Sum& s, TaskContext& ctx) {
    s.total += ctx.run();
    s.last_run = ctx.run();
  });
  for (int i = 0; i < 10; ++i) ex.run(g);
  CHECK(g.state<Sum>(t).total == 45);
  CHECK(g.state<Sum>(t).last_run == 9);
}

TEST_CASE("a deferred task finishes when its completion is completed elsewhere",
          "[engine][executor]") {
  Executor ex;
  Graph g;
  std::thread completer;
  std::atomic<bool> after_ran{false};
  auto wait = g.emplace("wait", Arena::kNetwork, [&](TaskContext& ctx) {
    Completion done = ctx.defer();
    completer = std::thread([done] {
      std::this_thread::sleep_for(20ms);
      done.complete();
      done.complete();  // a second call is ignored
    });
  });
  auto after = g.emplace("after", Arena::kCompute, [&](TaskContext&) { after_ran = true; });
  wait.precede(after);
  ex.run(g);
  completer.join();
  CHECK(after_ran);
  // The next run reuses the graph; the stale completion of run 0 must not finish run 1's task.
  ex.run(g);
  completer.join();
  CHECK(g.runs() == 2);
}

TEST_CASE("errors come back from run on the caller's thread", "[engine][executor]") {
  Executor ex;
  Graph g;
  std::atomic<bool> successor_ran{false};
  auto bad = g.emplace("bad", Arena::kCompute,
                       [](TaskContext&) { throw std::runtime_error("layer exploded"); });
  auto next = g.emplace("next", Arena::kCompute, [&](TaskContext&) { successor_ran = true; });
  bad.precede(next);
  CHECK_THROWS_WITH(ex.run(g), "layer exploded");
  CHECK_FALSE(successor_ran);

  Graph g2;
  g2.emplace("deferred-fail", Arena::kNetwork, [](TaskContext& ctx) {
    ctx.defer().fail(std::make_exception_ptr(std::runtime_error("peer rank 1 vanished")));
  });
  CHECK_THROWS_WITH(ex.run(g2), "peer rank 1 vanished");
}

TEST_CASE("posted jobs run on their arena and their errors reach the next run",
          "[engine][executor]") {
  Executor ex;
  std::atomic<bool> ran{false};
  ex.post(Arena::kNetwork, [&] { ran = true; });
  CHECK(wait_for(ran, 5000ms));
  std::atomic<bool> thrown{false};
  ex.post(Arena::kNetwork, [&] {
    thrown = true;
    throw std::runtime_error("shard failed");
  });
  // wait_idle() returns after the job's wrapper has stored its error (a fixed sleep here raced
  // with a descheduled network thread under load).
  ex.wait_idle();
  REQUIRE(thrown);
  Graph g;
  g.emplace("noop", Arena::kCompute, [](TaskContext&) {});
  CHECK_THROWS_WITH(ex.run(g), "shard failed");
  CHECK_NOTHROW(ex.run(g));
}

TEST_CASE("edges added between runs take effect, cycles included", "[engine][executor]") {
  Executor ex({2, 1});
  Graph g;
  std::atomic<bool> a_done{false};
  bool b_saw_a = false;
  auto a = g.emplace("a", Arena::kCompute, [&](TaskContext&) {
    std::this_thread::sleep_for(5ms);
    a_done = true;
  });
  auto b = g.emplace("b", Arena::kNetwork, [&](TaskContext&) { b_saw_a = a_done.load(); });
  ex.run(g);  // no edge yet
  a_done = false;
  a.precede(b);  // same number of tasks, one more edge
  ex.run(g);
  CHECK(b_saw_a);
  b.precede(a);
  CHECK_THROWS_WITH(ex.run(g), Catch::Contains("cycle"));
}

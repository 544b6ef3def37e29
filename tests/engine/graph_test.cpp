#include "engine/graph.h"

#include <catch2/catch.hpp>

using gradmesh::ContractError;
using gradmesh::engine::Arena;
using gradmesh::engine::Graph;
using gradmesh::engine::TaskContext;

TEST_CASE("graph records edges once and counts in-degrees", "[engine][graph]") {
  Graph g;
  auto a = g.emplace("a", Arena::kCompute, [](TaskContext&) {});
  auto b = g.emplace("b", Arena::kNetwork, [](TaskContext&) {});
  auto c = g.emplace("c", Arena::kCompute, [](TaskContext&) {});
  a.precede(b).precede(c);
  c.succeed(b);
  a.precede(b);  // duplicate edge ignored
  CHECK(g.size() == 3);
  CHECK(g.successors(a.index()).size() == 2);
  CHECK(g.in_degrees() == std::vector<std::size_t>{0, 1, 2});
  CHECK(b.name() == "b");
  CHECK(g.arena(b.index()) == Arena::kNetwork);
  CHECK_NOTHROW(g.check_acyclic());
}

TEST_CASE("graph rejects cycles, self-edges and foreign handles", "[engine][graph]") {
  Graph g;
  auto a = g.emplace("a", Arena::kCompute, [](TaskContext&) {});
  auto b = g.emplace("b", Arena::kCompute, [](TaskContext&) {});
  CHECK_THROWS_AS(a.precede(a), ContractError);
  a.precede(b);
  b.precede(a);
  CHECK_THROWS_WITH(g.check_acyclic(), Catch::Contains("cycle"));

  Graph other;
  auto x = other.emplace("x", Arena::kCompute, [](TaskContext&) {});
  CHECK_THROWS_AS(g.precede(a, x), ContractError);
}

TEST_CASE("stateful tasks own their state in the graph", "[engine][graph]") {
  struct Counter {
    int value = 0;
  };
  Graph g;
  auto t = g.emplace_stateful("count", Arena::kCompute, Counter{5},
                              [](Counter& c, TaskContext&) { ++c.value; });
  CHECK(g.state<Counter>(t).value == 5);
  CHECK_THROWS_AS(g.state<int>(t), ContractError);
  auto plain = g.emplace("plain", Arena::kCompute, [](TaskContext&) {});
  CHECK_THROWS_AS(g.state<Counter>(plain), ContractError);
}

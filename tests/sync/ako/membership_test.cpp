// Tests for sync/ako/membership.cpp: the peers an Ako node drops and takes back, and the quorum
// that cuts it off (Ako SoCC'16 sec. 4.3; sync/quorum.h).

#include "sync/ako/membership.h"

#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::ako::Membership;

namespace {

std::string address(std::size_t r) { return "127.0.0.1:" + std::to_string(7000 + r); }

}  // namespace

TEST_CASE("a dropped peer counts once, and comes back once", "[ako][membership]") {
  Membership m(0, 5, std::nullopt);
  CHECK(m.live() == 5);
  const auto first = m.drop(3);
  REQUIRE(first);
  CHECK(first->live == 4);
  CHECK(first->quorum_holds);  // 4 of 5 > half
  CHECK(m.dead(3));
  CHECK_FALSE(m.drop(3));  // reported twice
  CHECK_FALSE(m.drop(0));  // this node
  CHECK_FALSE(m.drop(9));  // no such rank
  CHECK(m.failures() == 1);
  CHECK_FALSE(m.take_back(2));  // never dropped
  CHECK(m.take_back(3) == 5u);
  CHECK_FALSE(m.dead(3));
  CHECK_FALSE(m.take_back(3));
  CHECK(m.rejoins() == 1);
  REQUIRE(m.drop(3));  // fails again: a second failure
  CHECK(m.failures() == 2);
}

TEST_CASE("below a majority the node is cut off, naming the peers it lost", "[ako][membership]") {
  Membership m(1, 4, std::nullopt);  // a majority of 4: 3
  CHECK(m.drop(0)->quorum_holds);
  const auto second = m.drop(2);
  REQUIRE(second);
  CHECK(second->live == 2);
  CHECK_FALSE(second->quorum_holds);
  CHECK_NOTHROW(m.check());
  const std::optional<std::string> why = m.cut_off(address, "rank 2 closed the connection");
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("cut off from the majority") &&
                       Catch::Contains("rank 0 (127.0.0.1:7000)") &&
                       Catch::Contains("rank 2 (127.0.0.1:7002)") &&
                       Catch::Contains("rank 2 closed the connection"));
  CHECK_FALSE(m.cut_off(address, "a later failure"));  // the first error stands
  CHECK_THROWS_WITH(m.check(), Catch::Contains("rank 2 closed the connection"));
  CHECK_THROWS_AS(m.check(), gradmesh::Error);
}

TEST_CASE("net.min_nodes replaces the majority", "[ako][membership]") {
  Membership m(0, 4, 2);
  CHECK(m.drop(1)->quorum_holds);
  CHECK(m.drop(2)->quorum_holds);  // 2 live of 4: enough with min_nodes = 2
  CHECK_FALSE(m.drop(3)->quorum_holds);
  CHECK_THAT(*m.cut_off(address, "gone"), Catch::Contains("too few nodes left"));
}

TEST_CASE("failures reported from many threads at once count each peer once", "[ako][membership]") {
  constexpr std::size_t kNodes = 8;
  Membership m(0, kNodes, 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (std::size_t r = 0; r < kNodes; ++r) (void)m.drop(r);
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(m.failures() == kNodes - 1);
  CHECK(m.live() == 1);
}

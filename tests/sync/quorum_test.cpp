// Tests for sync/quorum.h: the membership rule a node applies before it goes on without peers.

#include "sync/quorum.h"

#include <catch2/catch.hpp>

using gradmesh::sync::Quorum;

TEST_CASE("a majority is more than half of the members, and net.min_nodes replaces it",
          "[sync][quorum]") {
  CHECK(Quorum{1, {}}.needed() == 1);
  CHECK(Quorum{2, {}}.needed() == 2);  // a job of 2 cannot tell a dead peer from a cut link
  CHECK(Quorum{3, {}}.needed() == 2);
  CHECK(Quorum{4, {}}.needed() == 3);  // 2 + 2: neither half
  CHECK(Quorum{5, {}}.needed() == 3);
  CHECK(Quorum{4, {}}.holds(3));
  CHECK_FALSE(Quorum{4, {}}.holds(2));
  CHECK(Quorum{4, 2}.holds(2));
  CHECK_FALSE(Quorum{4, 4}.holds(3));
  CHECK(Quorum{4, 1}.holds(1));
}

TEST_CASE("the cut-off message names the peers lost, the count, the rule and the last failure",
          "[sync][quorum]") {
  const std::string majority =
      Quorum{4, {}}.cut_off_message({"rank 1 (h:1)", "rank 2 (h:2)"}, "peer rank 2: gone");
  CHECK(majority ==
        "cut off from the majority: this node lost contact with rank 1 (h:1), rank 2 (h:2) (2 of "
        "the 4 nodes it ran with; last: peer rank 2: gone); going on needs more than half of them "
        "(3), so this node stops and writes no metrics or checkpoints; the job goes on without it "
        "if the others are enough (restart it with --rejoin to take it back)");
  const std::string minimum = Quorum{4, 4}.cut_off_message({"h:3"}, "x");
  CHECK_THAT(minimum,
             Catch::StartsWith("too few nodes left: this node lost contact with h:3 (1 of the 4") &&
                 Catch::Contains("going on needs net.min_nodes = 4 live nodes"));
}

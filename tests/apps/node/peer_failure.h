#pragma once
// The end-to-end check every strategy must pass: a peer that disappears mid-job makes the others
// exit non-zero within 10 s, naming it (Catch2 assertions; include from test sources only).

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/apps/node/cluster.h"

namespace gradmesh::testing {

/// Starts `cluster` (configured for a job far longer than the test) with `extra` arguments, kills
/// its last rank with SIGKILL half a second after that rank is connected, and checks that every
/// other node exits non-zero within 10 s and that its last error names the dead peer by rank and
/// address — directly, or through a survivor that stopped first and said why (an Abort frame).
inline void check_a_killed_peer_is_named(Cluster& cluster, std::size_t nodes,
                                         const std::vector<std::string>& extra = {}) {
  const std::size_t dead = nodes - 1;
  cluster.start(extra);
  REQUIRE(wait_for_text(cluster.log(dead), "connected to every peer", std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  cluster.process(dead).kill_now();
  const std::string named = "peer rank " + std::to_string(dead) + " (" + cluster.address(dead) + ")";
  for (std::size_t r = 0; r < dead; ++r) {
    const auto code = cluster.process(r).wait_for(std::chrono::seconds(10));
    INFO(cluster.all_logs());
    REQUIRE(code.has_value());
    CHECK(*code != 0);
    const std::string log = cluster.log_text(r);
    const auto last_error = log.rfind("[error]");
    REQUIRE(last_error != std::string::npos);
    CHECK_THAT(log.substr(last_error), Catch::Contains(named));
  }
}

}  // namespace gradmesh::testing

#pragma once
// The end-to-end check every strategy must pass: a peer that disappears mid-job makes the others
// exit non-zero within 10 s, naming it (Catch2 assertions; include from test sources only).

#include <signal.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/apps/node/cluster.h"

namespace gradmesh::testing {

/// Starts `cluster` (configured for a job far longer than the test) with `extra` arguments, sends
/// its last rank `signal` (SIGKILL: gone; SIGSTOP: hung, its sockets open) half a second after
/// every rank is connected, and checks that every other node exits non-zero within `within` and
/// that its last error names the peer by rank and address — directly, or through a survivor that
/// stopped first and said why (an Abort frame). The signalled process is killed at the end.
inline void check_a_killed_peer_is_named(Cluster& cluster, std::size_t nodes,
                                         const std::vector<std::string>& extra = {},
                                         int signal = SIGKILL,
                                         std::chrono::seconds within = std::chrono::seconds(10)) {
  const std::size_t dead = nodes - 1;
  cluster.start(extra);
  // Mid-job: after every node's start-up (a peer lost during start-up is the transport tests'
  // case), so the others are connected to each other and have only the dead one to name.
  for (std::size_t r = 0; r < nodes; ++r)
    REQUIRE(wait_for_text(cluster.log(r), "connected to every peer", std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  REQUIRE(::kill(cluster.process(dead).pid(), signal) == 0);
  const std::string named =
      "peer rank " + std::to_string(dead) + " (" + cluster.address(dead) + ")";
  for (std::size_t r = 0; r < dead; ++r) {
    const auto code = cluster.process(r).wait_for(within);
    INFO(cluster.all_logs());
    REQUIRE(code.has_value());
    CHECK(*code == 1);  // an error exit naming the peer, not a signal (SIGPIPE, say)
    const std::string log = cluster.log_text(r);
    const auto last_error = log.rfind("[error]");
    REQUIRE(last_error != std::string::npos);
    CHECK_THAT(log.substr(last_error), Catch::Contains(named));
  }
  cluster.process(dead).kill_now();
}

/// Waits (up to 120 s) until rank `victim`'s log shows `mark`, sends it `signal`, and requires
/// every lower rank (the survivors: the victim is the last rank) to exit 0 within `limit`.
inline void signal_and_expect_survivors_finish(Cluster& cluster, std::size_t victim,
                                               const std::string& mark, int signal,
                                               std::chrono::seconds limit) {
  REQUIRE(wait_for_text(cluster.log(victim), mark, std::chrono::seconds(120)));
  REQUIRE(::kill(cluster.process(victim).pid(), signal) == 0);
  for (std::size_t r = 0; r < victim; ++r) {
    const auto code = cluster.process(r).wait_for(limit);
    INFO(cluster.all_logs());
    REQUIRE(code.has_value());
    CHECK(*code == 0);
  }
}

/// Waits (up to 120 s) until rank `victim`'s log shows `mark`, pauses it (SIGSTOP) until rank
/// `observer` rolls back without it, keeps it paused 3 s more (past a net.peer_timeout of 2 s on
/// its side too), then wakes it (SIGCONT): a partition that heals.
inline void pause_until_rolled_back(Cluster& cluster, std::size_t victim, std::size_t observer,
                                    const std::string& mark) {
  REQUIRE(wait_for_text(cluster.log(victim), mark, std::chrono::seconds(120)));
  REQUIRE(::kill(cluster.process(victim).pid(), SIGSTOP) == 0);
  REQUIRE(wait_for_text(cluster.log(observer), "rolling back", std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  REQUIRE(::kill(cluster.process(victim).pid(), SIGCONT) == 0);
}

/// What restarting rank `rank` of `cluster` with --rejoin (after it was killed) came to: its exit
/// status (within 240 s), those of ranks 0 .. rank - 1 (60 s each after it), and its log.
struct RejoinOutcome {
  std::optional<int> joiner;
  std::vector<std::optional<int>> survivors;
  std::string joiner_log;
};
inline RejoinOutcome rejoin_and_finish(Cluster& cluster, std::size_t rank) {
  cluster.restart(rank, {"--rejoin"});
  RejoinOutcome out;
  out.joiner = cluster.process(rank).wait_for(std::chrono::seconds(240));
  for (std::size_t r = 0; r < rank; ++r)
    out.survivors.push_back(cluster.process(r).wait_for(std::chrono::seconds(60)));
  out.joiner_log = read_file(cluster.restarted_log(rank));
  return out;
}

}  // namespace gradmesh::testing

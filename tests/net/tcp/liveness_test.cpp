// Liveness of a silent peer (net/tcp/lifecycle.cpp, check_silence): a node that hears nothing from
// a peer for net.peer_timeout asks the other peers whether they hear it (LivenessQuery, SWIM's
// indirect probe: Das, Gupta and Motivala, DSN 2002, sec. 3.1) and fails it only when none has
// heard it within the timeout, or when it has heard nothing itself for 6 peer timeouts.
// The stalled direction is made with TcpTransport::pause_reading_for_testing: the peer's bytes
// wait in the kernel, as behind TCP's retransmission backoff on a congested link.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "engine/error.h"
#include "net/frame.h"
#include "net/tcp/tcp_transport.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace gradmesh::net::testing;
using namespace std::chrono_literals;
using gradmesh::PeerError;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Three started nodes under `timeout_s` of peer_timeout; node 0 stops reading from rank 1 and,
// with `both`, node 2 too. Returns the time of the pause.
Clock::time_point pause_rank_1(Nodes& nodes, double timeout_s, bool both) {
  nodes = make_nodes(3, [timeout_s](TransportOptions& o) { o.peer_timeout_s = timeout_s; });
  start_all_ok(nodes);
  const auto start = Clock::now();
  nodes[0]->transport.pause_reading_for_testing(1, true);
  if (both) nodes[2]->transport.pause_reading_for_testing(1, true);
  return start;
}

std::size_t failures_of(Node& node) {
  const std::lock_guard lock(node.mutex);
  return node.failures.size();
}

}  // namespace

TEST_CASE(
    "a peer one node stops hearing while the others hear it is vouched for, not failed, "
    "up to 6 peer timeouts",
    "[net][transport][heartbeat][liveness]") {
  // Heartbeats every 0.375 s; a query's answers are due within 3 s (loopback: milliseconds).
  constexpr double kTimeout = 1.5;
  Nodes nodes;
  const auto start = pause_rank_1(nodes, kTimeout, false);
  // Three timeouts: node 0 has read nothing from rank 1 since, and node 2 has heard it all along.
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(failures_of(*nodes[r]) == 0);
  }
  // Node 0 asked node 2 about rank 1 and node 2 answered: control frames both ways.
  const auto counters = nodes[0]->transport.counters();
  CHECK(counters.longest_silence_by_peer[2] < kTimeout);
  // Still silent at 6 timeouts: a link broken one way, failed for good, naming why.
  REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }, 20s));
  const double failed_after = since(start);
  INFO("failed after " << failed_after << " s");
  // Node 0's silence counts from the last byte it read before the pause: a heartbeat, sent when a
  // link carried nothing for a quarter timeout, on a quarter-timeout tick, so up to half a
  // timeout before `start` (a fresh root measured 8.96 s against 9). Failing at once, without the
  // answers, would be at about 1 timeout.
  CHECK(failed_after >= 5.5 * kTimeout);
  CHECK(failed_after < 6 * kTimeout + 5.0);
  {
    const std::lock_guard lock(nodes[0]->mutex);
    const PeerError& e = nodes[0]->failures.front();
    CHECK(e.rank() == 1);
    CHECK(std::string(e.what()).find("though other peers heard from it") != std::string::npos);
  }
  nodes[0]->transport.close();
  nodes[1]->transport.close();
  nodes[2]->transport.close();
}

TEST_CASE("a peer no node hears is failed as soon as the others say so, not one timeout later",
          "[net][transport][heartbeat][liveness]") {
  constexpr double kTimeout = 1.5;
  Nodes nodes;
  const auto start = pause_rank_1(nodes, kTimeout, true);
  for (const std::size_t r : {0u, 2u}) {
    INFO("rank " << r);
    REQUIRE(nodes[r]->wait([](Node& n) { return !n.failures.empty(); }, 20s));
    const double failed_after = since(start);
    INFO("failed after " << failed_after << " s");
    CHECK(failed_after >= kTimeout);
    // The timeout, the heartbeat tick that finds it (a quarter) and the other's answer; one tick
    // more when the other, paused a moment later, still heard rank 1 within the timeout.
    CHECK(failed_after < 2 * kTimeout + 2.0);
    const std::lock_guard lock(nodes[r]->mutex);
    const PeerError& e = nodes[r]->failures.front();
    CHECK(e.rank() == 1);
    const std::string what = e.what();
    CHECK(what.find("sent nothing for") != std::string::npos);
    CHECK(what.find("either") != std::string::npos);
  }
  for (auto& node : nodes) node->transport.close();
}

TEST_CASE(
    "a liveness query or report about a rank out of range is malformed: counted, logged, "
    "no failure",
    "[net][transport][liveness]") {
  auto nodes = make_nodes(2, [](TransportOptions& o) { o.peer_timeout_s = 5.0; });
  start_all_ok(nodes);
  const auto inject = [&](const std::unique_ptr<OutgoingFrame>& frame) {
    nodes[1]->transport.send_raw_for_testing(0, frame->head());  // no payload: the head is all
  };
  const std::size_t control = 0;                  // unused by the receiver's checks
  inject(encode_liveness_query(7, control));      // no rank 7 in a job of 2
  inject(encode_liveness_query(1, control));      // about the asker itself
  inject(encode_liveness_report(9, 0, control));  // no rank 9
  inject(encode_liveness_report(0, 0, control));  // about the receiver itself
  // Still a working mesh: a message sent after them arrives after them (one connection's order).
  nodes[1]->transport.send(0, Message{0, 1, 2, 3, Payload{}});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }));
  CHECK(nodes[0]->transport.counters().malformed_frames == 4);
  for (auto& node : nodes) CHECK(failures_of(*node) == 0);
  shutdown_all(nodes);
}

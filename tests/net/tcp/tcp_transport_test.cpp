// Tests for net/tcp/tcp_transport.h: many peers in one process as threads on 127.0.0.1.

#include "net/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "net/frame.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace std::chrono_literals;
using gradmesh::PeerError;
using namespace gradmesh::net::testing;

TEST_CASE("two transports exchange 0 B, 1 B and 64 MiB frames intact both ways",
          "[net][transport]") {
  auto nodes = make_nodes(2);
  start_all_ok(nodes);
  const std::size_t sizes[] = {0, 1, 64u << 20};
  for (std::size_t from = 0; from < 2; ++from) {
    for (std::size_t i = 0; i < 3; ++i) {
      nodes[from]->transport.send(
          1 - from, Message{static_cast<std::uint8_t>(i % 2), static_cast<std::uint16_t>(10 + i),
                            1000 + i, from, pattern(sizes[i], unsigned(i + from))});
    }
  }
  for (std::size_t to = 0; to < 2; ++to) {
    Node& node = *nodes[to];
    REQUIRE(node.wait([](Node& n) { return n.received.size() == 3; }));
    const std::lock_guard lock(node.mutex);
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& [from, message] = node.received[i];
      CHECK(from == 1 - to);
      CHECK(message.lane == i % 2);
      CHECK(message.kind == 10 + i);
      CHECK(message.key == 1000 + i);
      CHECK(message.round == from);
      CHECK(has_pattern(message.payload, sizes[i], unsigned(i + from)));
    }
  }
  for (auto& node : nodes) {  // drop the 64 MiB buffers before shutting down
    const std::lock_guard lock(node->mutex);
    node->received.clear();
  }
  auto shutdown0 = std::async(std::launch::async, [&] { nodes[0]->transport.shutdown(5.0); });
  nodes[1]->transport.shutdown(5.0);
  shutdown0.get();
  const Counters a = nodes[0]->transport.counters();
  const Counters b = nodes[1]->transport.counters();
  CHECK(nodes[0]->failures.empty());
  CHECK(nodes[1]->failures.empty());
  CHECK(a.bytes_sent == b.bytes_received);
  CHECK(b.bytes_sent == a.bytes_received);
  CHECK(a.bytes_sent_by_peer[1] == a.bytes_sent);
  CHECK(b.bytes_received_by_peer[0] == b.bytes_received);
  CHECK(a.bytes_sent_by_lane.at("push") == b.bytes_received_by_lane.at("push"));
  CHECK(a.bytes_sent_by_lane.at("pull") == b.bytes_received_by_lane.at("pull"));
  CHECK(a.bytes_sent_by_lane.at("control") == b.bytes_received_by_lane.at("control"));
  CHECK(a.bytes_sent_by_lane.at("push") + a.bytes_sent_by_lane.at("pull") +
            a.bytes_sent_by_lane.at("control") ==
        a.bytes_sent);
  CHECK(a.bytes_sent > (64u << 20));
  CHECK(a.frames_sent == 6);  // Challenge, HelloAck (rank 1 dials), 3 data, Goodbye
  CHECK(b.frames_received == 6);
  CHECK(a.malformed_frames == 0);
}

TEST_CASE("three transports form a full mesh", "[net][transport]") {
  auto nodes = make_nodes(3);
  start_all_ok(nodes);
  for (std::size_t from = 0; from < 3; ++from)
    for (std::size_t to = 0; to < 3; ++to)
      if (to != from)
        for (std::uint64_t round = 0; round < 10; ++round)
          nodes[from]->transport.send(to, Message{0, 1, from * 10 + to, round, pattern(100, 7)});
  for (std::size_t to = 0; to < 3; ++to) {
    Node& node = *nodes[to];
    REQUIRE(node.wait([](Node& n) { return n.received.size() == 20; }));
    const std::lock_guard lock(node.mutex);
    std::vector<std::uint64_t> next_round(3, 0);
    for (const auto& [from, message] : node.received) {
      CHECK(message.key == from * 10 + to);
      CHECK(message.round == next_round[from]++);  // per-peer order is send order
      CHECK(has_pattern(message.payload, 100, 7));
    }
  }
  std::vector<std::future<void>> done;
  for (auto& node : nodes)
    done.push_back(std::async(std::launch::async, [&node] { node->transport.shutdown(5.0); }));
  for (auto& f : done) f.get();
  std::uint64_t sent = 0, received = 0;
  for (auto& node : nodes) {
    CHECK(node->failures.empty());
    sent += node->transport.counters().bytes_sent;
    received += node->transport.counters().bytes_received;
  }
  CHECK(sent == received);
}

TEST_CASE("a malformed frame from a peer is skipped and the next one delivered",
          "[net][transport]") {
  auto nodes = make_nodes(2);
  start_all_ok(nodes);
  // A valid prefix, a header that fails verification, and a payload to skip.
  std::vector<std::byte> junk(24, std::byte{0x5a});
  junk.insert(junk.end(), 5, std::byte{1});
  nodes[1]->transport.send_raw_for_testing(0, to_bytes({24, 5}, junk));
  // A valid header with a lane out of range is malformed too.
  const auto bad_lane = encode_data(Message{7, 0, 0, 0, {}});
  const auto bad_lane_head = bad_lane->head();
  nodes[1]->transport.send_raw_for_testing(0, bad_lane_head);
  nodes[1]->transport.send(0, Message{1, 2, 3, 4, pattern(10, 1)});
  Node& node = *nodes[0];
  REQUIRE(node.wait([](Node& n) { return n.received.size() == 1; }));
  {
    const std::lock_guard lock(node.mutex);
    CHECK(node.received[0].second.key == 3);
    CHECK(has_pattern(node.received[0].second.payload, 10, 1));
    CHECK(node.failures.empty());
  }
  CHECK(node.transport.counters().malformed_frames == 2);
  CHECK(node.transport.counters().rejected_connections == 0);
  auto shutdown1 = std::async(std::launch::async, [&] { nodes[1]->transport.shutdown(5.0); });
  nodes[0]->transport.shutdown(5.0);
  shutdown1.get();
  CHECK(nodes[1]->failures.empty());
}

TEST_CASE("garbage from a raw socket on the listening port is rejected, node keeps running",
          "[net][transport]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(2, {}, &ports);
  start_all_ok(nodes);

  // 1. Not our protocol at all: the prefix announces a huge frame.
  const int http = dial_raw(ports[0]);
  const char request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(::send(http, request, sizeof(request) - 1, 0) > 0);
  // 2. A plausible prefix with a header that fails verification.
  const int junk = dial_raw(ports[0]);
  const auto frame = to_bytes({16, 0}, std::vector<std::byte>(16, std::byte{0x33}));
  REQUIRE(::send(junk, frame.data(), frame.size(), 0) == static_cast<ssize_t>(frame.size()));
  // 3. A valid frame that is not a Hello.
  const int data = dial_raw(ports[0]);
  const auto goodbye = encode_goodbye(0);
  REQUIRE(::send(data, goodbye->head().data(), goodbye->head().size(), 0) > 0);

  char byte = 0;
  for (const int fd : {http, junk, data}) {
    CHECK(::recv(fd, &byte, 1, 0) <=
          0);  // the node closed (or reset, if bytes were left unread) it
    ::close(fd);
  }
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (nodes[0]->transport.counters().rejected_connections < 3 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(nodes[0]->transport.counters().rejected_connections == 3);

  nodes[1]->transport.send(0, Message{0, 0, 9, 0, pattern(3, 3)});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }));
  CHECK(nodes[0]->failures.empty());
  auto shutdown1 = std::async(std::launch::async, [&] { nodes[1]->transport.shutdown(5.0); });
  nodes[0]->transport.shutdown(5.0);
  shutdown1.get();
}

TEST_CASE("an oversize frame prefix fails that peer only", "[net][transport]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      3, [](TransportOptions& o) { o.max_frame_bytes = 1u << 20; }, &ports);
  start_all_ok(nodes);
  nodes[2]->transport.send_raw_for_testing(0, to_bytes({64, 2u << 20}, {}));
  Node& node = *nodes[0];
  REQUIRE(node.wait([](Node& n) { return !n.failures.empty(); }, 2s));
  {
    const std::lock_guard lock(node.mutex);
    REQUIRE(node.failures.size() == 1);
    CHECK(node.failures[0].rank() == 2);
    CHECK(node.failures[0].address() == "127.0.0.1:" + std::to_string(ports[2]));
    CHECK_THAT(node.failures[0].what(), Catch::Contains("max_frame_bytes"));
  }
  CHECK(node.transport.counters().malformed_frames == 1);
  CHECK_THROWS_AS(node.transport.send(2, Message{}), PeerError);
  // Rank 2 sees its connection to 0 drop; 0 and 1 still talk.
  REQUIRE(nodes[2]->wait([](Node& n) { return !n.failures.empty(); }, 2s));
  node.transport.send(1, Message{0, 0, 5, 0, pattern(8, 8)});
  REQUIRE(nodes[1]->wait([](Node& n) { return n.received.size() == 1; }, 2s));
  nodes[1]->transport.send(0, Message{0, 0, 6, 0, pattern(8, 8)});
  REQUIRE(node.wait([](Node& n) { return n.received.size() == 1; }, 2s));
  CHECK(nodes[1]->failures.empty());
  std::vector<std::future<void>> done;
  for (auto& n : nodes)
    done.push_back(std::async(std::launch::async, [&n] { n->transport.shutdown(5.0); }));
  for (auto& f : done) f.get();
}

TEST_CASE("handshake mismatch makes start() throw on both sides naming what differs",
          "[net][transport]") {
  struct Case {
    const char* name;
    std::function<void(TransportOptions&)> edit;
    const char* expected;
  };
  const Case cases[] = {
      {"config hash", [](TransportOptions& o) { o.config_hash = 0xabcd; }, "config hash differs"},
      {"config keys",
       [](TransportOptions& o) {
         // Rank 1's config says 0.05; both configs carry their text (rank 0's is set below).
         o.config_hash = 0xabcd;
         o.config_text = "optimizer.lr = 0.05\n";
       },
       "config differs: optimizer.lr = 0.05 on rank 1, 0.1 on rank 0"},
      {"job name", [](TransportOptions& o) { o.job_name = "other"; }, "job name differs"},
      {"peer list", [](TransportOptions& o) { o.peers[0].host = "localhost"; },
       "peer list differs"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      auto nodes = make_nodes(2, [&](TransportOptions& o) {
        o.connect_timeout_s = 5.0;
        o.config_text = "optimizer.lr = 0.1\n";
        if (o.rank == 1) c.edit(o);
      });
      const auto start = std::chrono::steady_clock::now();
      const auto errors = start_all(nodes);
      CHECK(std::chrono::steady_clock::now() - start < 3s);
      for (std::size_t r = 0; r < 2; ++r) {
        REQUIRE(errors[r] != nullptr);
        const std::string what = message_of(errors[r]);
        CHECK_THAT(what, Catch::Contains(c.expected));
        CHECK_THAT(what, Catch::Contains("peer rank " + std::to_string(1 - r)));
        CHECK_THROWS_AS(std::rethrow_exception(errors[r]), PeerError);
      }
    }
  }
}

TEST_CASE("a missing peer makes start() throw within connect_timeout naming it",
          "[net][transport]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      3, [](TransportOptions& o) { o.connect_timeout_s = 1.0; }, &ports);
  nodes.pop_back();  // rank 2 never starts
  const auto start = std::chrono::steady_clock::now();
  const auto errors = start_all(nodes);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed < 2s);
  CHECK(elapsed >= 900ms);
  for (const auto& error : errors) {
    REQUIRE(error != nullptr);
    const std::string what = message_of(error);
    // Under load one node may see the other give up first; it then names that one too.
    CHECK_THAT(what, Catch::Contains("timed out after 1.0 s waiting for peers: "));
    CHECK_THAT(what, Catch::Contains("rank 2 (127.0.0.1:" + std::to_string(ports[2]) + ")"));
    try {
      std::rethrow_exception(error);
    } catch (const PeerError& e) {
      CHECK(e.rank() == 2);
    }
  }
}

TEST_CASE(
    "a peer that connects and then fails during start-up is named as soon as every other "
    "peer is connected, not at the connect timeout",
    "[net][transport]") {
  // Rank 2 connects to rank 0, gives up on rank 1 (absent) after 2 s and closes. Rank 0 keeps
  // waiting while rank 1 is missing (rank 1 may be what rank 2 gave up on); once rank 1 is in,
  // rank 2 is the only one missing and rank 0's start() names it at once, not after its 60 s.
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      3,
      [](TransportOptions& o) {
        o.connect_timeout_s = o.rank == 0 ? 60.0 : o.rank == 1 ? 6.0 : 2.0;
      },
      &ports);
  auto rank0 = std::async(std::launch::async, [&] { nodes[0]->transport.start(); });
  std::string gave_up;
  try {
    nodes[2]->transport.start();
  } catch (const PeerError& e) {
    gave_up = e.what();
  }
  INFO(gave_up);
  REQUIRE_THAT(gave_up, Catch::Contains("waiting for peers: rank 1 ("));
  REQUIRE_THAT(gave_up, !Catch::Contains("rank 0 ("));       // it was connected to rank 0
  CHECK(rank0.wait_for(1s) == std::future_status::timeout);  // rank 1 is still missing
  const auto start = std::chrono::steady_clock::now();
  auto rank1 = std::async(std::launch::async, [&] {
    try {
      nodes[1]->transport.start();
    } catch (const PeerError&) {
      // rank 2 is gone for rank 1 too: it names it at its own deadline (6 s)
    }
  });
  REQUIRE(rank0.wait_for(30s) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // far inside the 60 s timeout
  try {
    rank0.get();
    FAIL("rank 0's start() succeeded without rank 2");
  } catch (const PeerError& e) {
    CHECK(e.rank() == 2);
    CHECK_THAT(e.what(), Catch::Contains("peer rank 2 (127.0.0.1:" + std::to_string(ports[2])));
  }
  rank1.get();
}

TEST_CASE("a peer that disappears is reported within 2 s and send() to it throws",
          "[net][transport]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(2, {}, &ports);
  start_all_ok(nodes);
  const auto start = std::chrono::steady_clock::now();
  nodes[1].reset();  // no shutdown(): abrupt close
  Node& node = *nodes[0];
  REQUIRE(node.wait([](Node& n) { return !n.failures.empty(); }, 2s));
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  {
    const std::lock_guard lock(node.mutex);
    REQUIRE(node.failures.size() == 1);
    CHECK(node.failures[0].rank() == 1);
    CHECK(node.failures[0].address() == "127.0.0.1:" + std::to_string(ports[1]));
    CHECK_THAT(node.failures[0].what(), Catch::Contains("connection closed unexpectedly"));
  }
  try {
    node.transport.send(1, Message{});
    FAIL("send() to a failed peer did not throw");
  } catch (const PeerError& e) {
    CHECK(e.rank() == 1);
  }
  node.transport.shutdown(1.0);
  CHECK(node.failures.size() == 1);
}

TEST_CASE("a large frame on a slow link is no silence: no peer_timeout while it is in flight",
          "[net][transport][heartbeat]") {
  // 1 MiB at 250 kB/s takes about 4 s, eight peer timeouts; the receiver hears its bytes arrive
  // (liveness is any byte read, not a whole frame), the sender hears the receiver's heartbeats.
  constexpr double kRate = 250e3;
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  auto nodes = make_nodes(2, [](TransportOptions& o) {
    o.peer_timeout_s = 0.5;
    o.max_send_rate = kRate;
  });
  start_all_ok(nodes);
  std::vector<std::byte> bytes(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<std::byte>(i * 7);
  const auto start = std::chrono::steady_clock::now();
  nodes[0]->transport.send(1, Message{0, 1, 2, 3, Payload::copy_of(bytes)});
  REQUIRE(nodes[1]->wait([](Node& n) { return !n.received.empty() || !n.failures.empty(); }, 30s));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("1 MiB took " << took << " s");
  CHECK(took > 0.5 * static_cast<double>(kBytes) / kRate);  // the link was slow, far past 0.5 s
  for (auto& node : nodes) {
    const std::lock_guard lock(node->mutex);
    CHECK(node->failures.empty());
  }
  {
    const std::lock_guard lock(nodes[1]->mutex);
    REQUIRE(nodes[1]->received.size() == 1);
    const auto got = nodes[1]->received[0].second.payload.bytes();
    CHECK(std::equal(got.begin(), got.end(), bytes.begin(), bytes.end()));
  }
  shutdown_all(nodes);
}

TEST_CASE("idle peers under a short peer_timeout keep talking by heartbeats and never fail",
          "[net][transport][heartbeat]") {
  auto nodes = make_nodes(3, [](TransportOptions& o) { o.peer_timeout_s = 0.4; });
  start_all_ok(nodes);
  const auto control = [](Node& node) {
    return node.transport.counters().bytes_received_by_lane.at(kControlLane);
  };
  const std::uint64_t before = control(*nodes[0]);
  std::this_thread::sleep_for(2s);  // five timeouts with nothing to send
  for (auto& node : nodes) {
    const std::lock_guard lock(node->mutex);
    CHECK(node->failures.empty());
  }
  // A heartbeat every 0.1 s from each of 2 peers: about 40 frames in 2 s (at least a quarter).
  const auto counters = nodes[0]->transport.counters();
  CHECK(control(*nodes[0]) > before);
  CHECK(counters.frames_received >= 10);
  // The longest silence per peer: a heartbeat period or a little more (every 0.1 s, on the 0.1 s
  // timer tick), never this node's own rank, and below the timeout (no one failed).
  REQUIRE(counters.longest_silence_by_peer.size() == 3);
  CHECK(counters.longest_silence_by_peer[0] == 0.0);
  for (std::size_t r = 1; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(counters.longest_silence_by_peer[r] >= 0.05);
    CHECK(counters.longest_silence_by_peer[r] < 0.4);
  }
  // Still a working mesh.
  nodes[2]->transport.send(0, Message{0, 1, 2, 3, Payload{}});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }));
  std::vector<std::future<void>> stopped;
  for (auto& node : nodes) {
    stopped.push_back(std::async(std::launch::async, [&node] { node->transport.shutdown(5.0); }));
  }
  for (auto& f : stopped) f.get();
  for (auto& node : nodes) {  // a peer shutting down is no failure
    const std::lock_guard lock(node->mutex);
    CHECK(node->failures.empty());
  }
}

TEST_CASE("a peer_timeout that is negative or not finite is a config error naming it",
          "[net][transport][heartbeat]") {
  for (const double bad : {-1.0, std::numeric_limits<double>::infinity()}) {
    auto options = options_for(0, free_ports(1));
    options.peer_timeout_s = bad;
    CHECK_THROWS_WITH(TcpTransport(options), Catch::Contains("peer_timeout_s"));
  }
}

TEST_CASE("a node that aborts tells its peers why, and they report it as that peer's failure",
          "[net][transport]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(3, {}, &ports);
  start_all_ok(nodes);
  nodes[2]->transport.abort("peer rank 7 (10.0.0.7:7000): connection reset by peer");
  for (std::size_t r = 0; r < 2; ++r) {
    Node& node = *nodes[r];
    REQUIRE(node.wait([](Node& n) { return !n.failures.empty(); }, 2s));
    const std::lock_guard lock(node.mutex);
    CHECK(node.failures[0].rank() == 2);
    CHECK(node.failures[0].address() == "127.0.0.1:" + std::to_string(ports[2]));
    CHECK_THAT(node.failures[0].what(),
               Catch::Contains("aborted the job: peer rank 7 (10.0.0.7:7000)"));
  }
  // The two others still talk to each other.
  nodes[0]->transport.send(1, Message{0, 1, 2, 3, Payload{}});
  REQUIRE(nodes[1]->wait([](Node& n) { return n.received.size() == 1; }));
  nodes[2]->transport.abort("twice");  // idempotent
  for (std::size_t r = 0; r < 2; ++r) nodes[r]->transport.shutdown(2.0);
  CHECK(nodes[0]->failures.size() == 1);
}

TEST_CASE("send-rate cap holds within 5% over a 2 s loopback transfer", "[net][transport][rate]") {
  constexpr double kRate = 20.0e6;  // bytes/s
  auto nodes = make_nodes(2, [&](TransportOptions& o) { o.max_send_rate = kRate; });
  start_all_ok(nodes);
  constexpr std::size_t kFrame = 128 * 1024;
  constexpr std::size_t kFrames = 330;  // ~43 MB: ~2.2 s at the cap
  const Payload payload = pattern(kFrame, 1);
  const auto begin = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < kFrames; ++i)
    nodes[1]->transport.send(0, Message{0, 0, i, 0, payload});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == kFrames; }, 8s));
  const std::lock_guard lock(nodes[0]->mutex);
  // Rate between the first and the last arrival: the initial bucket burst (10 ms) is excluded.
  const double seconds =
      std::chrono::duration<double>(nodes[0]->arrivals.back() - nodes[0]->arrivals.front()).count();
  const double wire_per_frame =
      static_cast<double>(nodes[1]->transport.counters().bytes_sent_by_lane.at("push")) /
      static_cast<double>(kFrames);
  const double rate = wire_per_frame * static_cast<double>(kFrames - 1) / seconds;
  INFO("measured " << rate / 1e6 << " MB/s over " << seconds << " s (total "
                   << std::chrono::duration<double>(nodes[0]->arrivals.back() - begin).count()
                   << " s)");
  CHECK(seconds > 1.9);
  // The cap holds: at most 5% over it. Measured 19.06-20.43 MB/s (-4.7% to +2.2%) over 30 runs
  // on 2 cores beside 2 busy loops and a -j2 build (2026-11-24); the one low run was a last
  // arrival about 100 ms late (a descheduled receiver, not the limiter), so the lower bound,
  // which only checks that the limiter lets the cap through, sits at -15%, 3 x that.
  CHECK(rate <= kRate * 1.05);
  CHECK(rate >= kRate * 0.85);
}

TEST_CASE("a restarted node rejoins under its old rank: its peers take it back and both ways work",
          "[net][transport][rejoin]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(3, {}, &ports);
  start_all_ok(nodes);
  nodes[1]->transport.close();  // rank 1 dies: a lower and a higher peer see it fail
  for (const std::size_t r : {0, 2}) {
    REQUIRE(nodes[r]->wait([](Node& n) { return n.failures.size() == 1; }, 5s));
    CHECK_THROWS_AS(nodes[r]->transport.send(1, Message{0, 1, 2, 3, Payload{}}), PeerError);
  }
  // A restarted rank 1 that does not say it rejoins is refused, naming the flag.
  {
    auto options = options_for(1, ports);
    options.connect_timeout_s = 1.0;
    Node stale(std::move(options));
    CHECK_THROWS_WITH(stale.transport.start(), Catch::Contains("--rejoin"));
  }
  // With rejoin it dials both (rank 0 below it, rank 2 above it) and is taken back.
  auto options = options_for(1, ports);
  options.rejoin = true;
  nodes[1] = std::make_unique<Node>(std::move(options));
  REQUIRE_NOTHROW(nodes[1]->transport.start());
  for (const std::size_t r : {0, 2}) {
    INFO("rank " << r);
    REQUIRE(nodes[r]->wait([](Node& n) { return n.rejoined.size() == 1; }, 5s));
    const std::lock_guard lock(nodes[r]->mutex);
    CHECK(nodes[r]->rejoined[0] == 1);
  }
  nodes[0]->transport.send(1, Message{0, 1, 10, 0, Payload{}});
  nodes[2]->transport.send(1, Message{0, 1, 12, 0, Payload{}});
  nodes[1]->transport.send(0, Message{0, 1, 21, 0, Payload{}});
  nodes[1]->transport.send(2, Message{0, 1, 21, 0, Payload{}});
  REQUIRE(nodes[1]->wait([](Node& n) { return n.received.size() == 2; }));
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }));
  REQUIRE(nodes[2]->wait([](Node& n) { return n.received.size() == 1; }));
  // A second node claiming rank 1 while the first is live is told to retry, and gives up.
  {
    auto again = options_for(1, ports);
    again.peers[1].port = free_ports(1)[0];  // another process on another port
    again.rejoin = true;
    again.connect_timeout_s = 1.0;
    Node second(std::move(again));
    CHECK_THROWS_WITH(second.transport.start(), Catch::Contains("still live here"));
  }
  // It may fail again, and is reported again; then the mesh shuts down cleanly.
  nodes[1]->transport.close();
  for (const std::size_t r : {0, 2}) {
    REQUIRE(nodes[r]->wait([](Node& n) { return n.failures.size() == 2; }, 5s));
  }
  auto stop0 = std::async(std::launch::async, [&] { nodes[0]->transport.shutdown(2.0); });
  nodes[2]->transport.shutdown(2.0);
  stop0.get();
}

TEST_CASE(
    "a node of a newer view claiming a rank that failed in this node's older view is told "
    "to dial again, not refused",
    "[net][transport][rejoin][view]") {
  // A rollback renumbers the survivors: a rank that failed here (it aborted for another's
  // failure) comes back as a live node of the next view, while this node still leaves the old.
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(3, {}, &ports);
  start_all_ok(nodes);
  nodes[1]->transport.close();
  REQUIRE(nodes[0]->wait([](Node& n) { return n.failures.size() == 1; }, 5s));
  auto options = options_for(1, ports);
  options.view = 1;
  options.connect_timeout_s = 1.0;
  Node newer(std::move(options));
  const auto error = [&] {
    try {
      newer.transport.start();
    } catch (...) {
      return std::current_exception();
    }
    return std::exception_ptr{};
  }();
  REQUIRE(error != nullptr);
  CHECK_THAT(message_of(error), Catch::Contains("dial again") && !Catch::Contains("--rejoin"));
  auto stop0 = std::async(std::launch::async, [&] { nodes[0]->transport.shutdown(2.0); });
  nodes[2]->transport.shutdown(2.0);
  stop0.get();
}

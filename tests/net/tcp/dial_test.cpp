// Tests for name resolution and dialing in net/tcp/ (resolve.h; dialer.h's dialing rounds and
// listener.h): a peer's host resolves to every address, the dialer tries each until one connects
// (RFC 8305), a node listens on every address of its own entry, and an error names them all.

#include "net/tcp/resolve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace gradmesh::net::testing;
using gradmesh::PeerError;

namespace {

// Whether this host can bind [::1] (IPv6 loopback configured): some containers have none.
bool has_ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

// A resolver that answers `literals` for "localhost" and fails for any other host.
Resolver localhost_as(std::vector<std::string> literals) {
  return [literals = std::move(literals)](const std::string& host) {
    if (host != "localhost") throw std::runtime_error("unexpected host " + host);
    return literals;
  };
}

// Peer list entries naming "localhost" (ports from free_ports()).
void name_localhost(TransportOptions& options) {
  for (auto& peer : options.peers) peer.host = "localhost";
}

void exchange_one_message(Nodes& nodes) {
  nodes[1]->transport.send(0, Message{0, 1, 7, 0, pattern(32, 3)});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }));
  const std::lock_guard lock(nodes[0]->mutex);
  CHECK(has_pattern(nodes[0]->received[0].second.payload, 32, 3));
}

}  // namespace

TEST_CASE("resolve_all keeps every address in the resolver's order, once each", "[net][dial]") {
  const Endpoint endpoint{"localhost", 4000};
  const auto addresses =
      tcp::resolve_all(0, endpoint, localhost_as({"::1", "127.0.0.1", "::1", "10.1.2.3"}));
  REQUIRE(addresses.size() == 3);
  CHECK(addresses[0].text == "[::1]:4000");
  CHECK(addresses[0].socket_address.ss_family == AF_INET6);
  CHECK(addresses[1].text == "127.0.0.1:4000");
  CHECK(addresses[1].socket_address.ss_family == AF_INET);
  CHECK(addresses[2].text == "10.1.2.3:4000");
}

TEST_CASE("resolve_all with the system resolver gives localhost's IPv4 loopback", "[net][dial]") {
  // Every standard /etc/hosts names 127.0.0.1 localhost; a dual-stack one names ::1 as well.
  const auto addresses = tcp::resolve_all(0, Endpoint{"localhost", 4000}, {});
  bool v4 = false;
  for (const auto& a : addresses) v4 = v4 || a.text == "127.0.0.1:4000";
  CHECK(v4);
  // An IP literal is its own one address.
  const auto literal = tcp::resolve_all(0, Endpoint{"::1", 4001}, {});
  REQUIRE(literal.size() == 1);
  CHECK(literal[0].text == "[::1]:4001");
}

TEST_CASE("resolve_all names the host and why when there is no address", "[net][dial]") {
  const Endpoint endpoint{"localhost", 4000};
  try {
    (void)tcp::resolve_all(3, endpoint, localhost_as({}));
    FAIL("no address did not throw");
  } catch (const PeerError& e) {
    CHECK(e.rank() == 3);
    CHECK_THAT(e.what(),
               Catch::Contains("cannot resolve host 'localhost': the resolver gave no address"));
  }
  CHECK_THROWS_WITH(tcp::resolve_all(0, endpoint, localhost_as({"127.0.0.1", "not-an-ip"})),
                    Catch::Contains("the resolver gave 'not-an-ip'"));
  CHECK_THROWS_WITH(tcp::resolve_all(0, Endpoint{"elsewhere", 1}, localhost_as({"127.0.0.1"})),
                    Catch::Contains("the resolver threw: unexpected host elsewhere"));
  CHECK_THROWS_AS(tcp::resolve_all(0, Endpoint{"no-such-host.invalid", 1}, {}), PeerError);
}

TEST_CASE("a dialer whose first address of a peer has no listener connects through the next",
          "[net][dial]") {
  // The fresh-Debian case: the peer list names `localhost`, this host resolves it to ::1 first,
  // and the peer listens on 127.0.0.1 only (here: its own resolver gives just that). Nothing
  // listens on [::1] at that port (or this host has no IPv6 loopback): that attempt fails and
  // the next address connects, well before connect_timeout.
  auto nodes = make_nodes(2, [](TransportOptions& o) {
    name_localhost(o);
    o.connect_timeout_s = 10.0;
    o.resolver = o.rank == 0 ? localhost_as({"127.0.0.1"}) : localhost_as({"::1", "127.0.0.1"});
  });
  start_all_ok(nodes);
  exchange_one_message(nodes);
  shutdown_all(nodes);
}

TEST_CASE("a peer list naming localhost works with the system resolver", "[net][dial]") {
  // Whatever this host's /etc/hosts says of localhost (127.0.0.1 alone, or ::1 too, in any
  // order), each node listens on every address of its entry and dials them in turn.
  auto nodes = make_nodes(2, [](TransportOptions& o) {
    name_localhost(o);
    o.connect_timeout_s = 10.0;
  });
  start_all_ok(nodes);
  exchange_one_message(nodes);
  shutdown_all(nodes);
}

TEST_CASE("a node listens on every address of its own peer-list entry", "[net][dial]") {
  const bool v6 = has_ipv6_loopback();
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      1,
      [&](TransportOptions& o) {
        name_localhost(o);
        o.resolver = v6 ? localhost_as({"::1", "127.0.0.1"}) : localhost_as({"127.0.0.1"});
      },
      &ports);
  nodes[0]->transport.start();  // alone: listens, dials no one
  CHECK(nodes[0]->transport.peer_address(0) == "localhost:" + std::to_string(ports[0]));
  CHECK_THROWS_AS(nodes[0]->transport.peer_address(1), gradmesh::ContractError);
  const int v4_fd = dial_raw(ports[0]);
  ::close(v4_fd);
  if (v6) {
    const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_loopback;
    address.sin6_port = htons(ports[0]);
    CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    ::close(fd);
  } else {
    WARN("this host has no IPv6 loopback: only 127.0.0.1 checked");
  }
  nodes[0]->transport.shutdown(1.0);
}

TEST_CASE("a peer none of whose addresses connects is named with every address and why",
          "[net][dial]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      2,
      [](TransportOptions& o) {
        name_localhost(o);
        o.connect_timeout_s = 1.0;
        o.resolver = localhost_as({"127.0.0.1", "::1"});
      },
      &ports);
  nodes.erase(nodes.begin());  // rank 0 never starts; rank 1 dials it
  try {
    nodes[0]->transport.start();
    FAIL("start() with a missing peer did not throw");
  } catch (const PeerError& e) {
    const std::string p = std::to_string(ports[0]);
    CHECK(e.rank() == 0);
    CHECK(e.address() == "localhost:" + p);
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("rank 0 (localhost:" + p + ") [could not connect to "));
    CHECK_THAT(what, Catch::Contains("127.0.0.1:" + p + ": "));
    CHECK_THAT(what, Catch::Contains("[::1]:" + p + ": "));
  }
}

TEST_CASE("a long peer list with most peers missing gives an error of bounded length",
          "[net][dial]") {
  // 1,000 peers that never start: the error names the first 8, then counts the rest (a
  // 10,000-entry list once made a 288,952-character line). Rank 999 dials the 999 others.
  const auto ports = free_ports(1000);  // bound and released: no one listens on them
  TransportOptions options = options_for(999, ports);
  options.connect_timeout_s = 0.5;
  TcpTransport transport(std::move(options));
  try {
    transport.start();
    FAIL("start() with 999 missing peers did not throw");
  } catch (const PeerError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("rank 7 (127.0.0.1:" + std::to_string(ports[7]) + ")"));
    CHECK_THAT(what, !Catch::Contains("rank 8 (127.0.0.1:" + std::to_string(ports[8]) + ")"));
    CHECK_THAT(what, Catch::Contains(" and 991 more"));
    CHECK(what.size() < 4000);
  }
}

TEST_CASE(
    "a flood of bad connections is counted one by one and logged in a bounded number of "
    "lines",
    "[net][dial]") {
  // Each rejected connection used to write its own warning: 2,000 in 0.19 s wrote 2,000 lines.
  // Now rejected_connections counts every one, and the log gets at most one line a second.
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("flood", sink));
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(1, {}, &ports);
  nodes[0]->transport.start();
  constexpr std::uint64_t kFlood = 300;
  const char request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto began = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < kFlood; ++i) {
    const int fd = dial_raw(ports[0]);
    REQUIRE(::send(fd, request, sizeof(request) - 1, 0) > 0);
    ::close(fd);
  }
  const auto wait_count = [&](std::uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (nodes[0]->transport.counters().rejected_connections < count &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
  };
  wait_count(kFlood);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  // A second later one more: its line says how many of the flood were left out.
  std::this_thread::sleep_for(1100ms);
  const int last = dial_raw(ports[0]);
  REQUIRE(::send(last, request, sizeof(request) - 1, 0) > 0);
  ::close(last);
  wait_count(kFlood + 1);
  CHECK(nodes[0]->transport.counters().rejected_connections == kFlood + 1);
  nodes[0]->transport.shutdown(1.0);
  spdlog::set_default_logger(previous);
  const std::string log = captured.str();
  std::size_t lines = 0;
  std::uint64_t left_out = 0;  // the sum of every line's "(and N more ..."
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("rejected inbound connection") == std::string::npos) continue;
    ++lines;
    if (const auto at = line.find("(and "); at != std::string::npos)
      left_out += std::stoull(line.substr(at + 5));
  }
  INFO(seconds << " s for the flood, log:\n" << log.substr(0, 3000));
  // One line a second at most (the first at once): the flood's seconds rounded up, one more, and
  // the last connection's.
  CHECK(lines >= 2);
  CHECK(lines <= static_cast<std::size_t>(seconds) + 3);
  CHECK(lines + left_out == kFlood + 1);  // every rejection logged or counted in a later line
}

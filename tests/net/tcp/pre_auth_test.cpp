// Tests of the bounds on what a stranger can make a node hold before it proves itself
// (net/tcp: the pre-authentication header limit, buffers sized to what arrived, the handshake
// deadline, the caps on handshakes in progress).

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>
#include <vector>

#include "net/frame.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace gradmesh::net::testing;

namespace {

// Resident set size of this process, bytes (/proc/self/statm).
std::size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// Whether the node closed `fd` (EOF or reset) within `limit`.
bool closed_within(int fd, std::chrono::milliseconds limit) {
  timeval timeout{static_cast<time_t>(limit.count() / 1000),
                  static_cast<suseconds_t>((limit.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char byte = 0;
  for (;;) {
    const ssize_t got = ::recv(fd, &byte, 1, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return true;
    if (got < 0 && errno != EINTR) return false;  // timed out, still open
  }
}

}  // namespace

TEST_CASE(
    "connections that announce a large header and stall cost no memory and are closed by "
    "the handshake deadline, the mesh beside them working",
    "[net][pre_auth]") {
  // Before: a prefix announcing a 1 MiB header made the node allocate and zero 1 MiB for that
  // connection at once, and nothing closed it: 1,000 held +1,025 MB. Now the header buffer grows
  // with the bytes that came (4 KiB here), a stranger's header may not exceed 4 KiB, at most
  // 2 x peers + 64 handshakes are in progress, and each ends at net.handshake_timeout.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  // 400 client sockets here, plus the nodes' (at most 68 pending, each closed after the cap).
  const std::size_t flood =
      std::min<std::size_t>(400, files.rlim_cur > 200 ? files.rlim_cur - 200 : 0);
  REQUIRE(flood >= 100);
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      2, [](TransportOptions& o) { o.handshake_timeout_s = 1.0; }, &ports);
  start_all_ok(nodes);
  const std::size_t rss_before = rss_bytes();
  std::vector<int> stalled;
  // Half announce an authenticated peer's largest handshake header (1 MiB: refused at the
  // prefix), half one a stranger may send (4,000 bytes: read as it comes, then the deadline);
  // each sends 8 bytes of it and stalls.
  const auto large = to_bytes({1u << 20, 0}, std::vector<std::byte>(8, std::byte{0x11}));
  const auto small = to_bytes({4000, 0}, std::vector<std::byte>(8, std::byte{0x11}));
  for (std::size_t i = 0; i < flood; ++i) {
    const auto& prefix = i % 2 == 0 ? large : small;
    const int fd = dial_raw(ports[0]);
    REQUIRE(::send(fd, prefix.data(), prefix.size(), 0) == static_cast<ssize_t>(prefix.size()));
    stalled.push_back(fd);
  }
  // Silent ones too: no byte at all.
  std::vector<int> silent;
  for (std::size_t i = 0; i < 20; ++i) silent.push_back(dial_raw(ports[0]));
  // The mesh goes on beside them.
  nodes[1]->transport.send(0, Message{0, 1, 7, 0, pattern(4096, 5)});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }));
  const std::size_t rss_during = rss_bytes();
  // Every one closed: by the cap at once, or by the 1 s deadline (+ its sweep, a quarter of it).
  for (const int fd : stalled) CHECK(closed_within(fd, 5000ms));
  for (const int fd : silent) CHECK(closed_within(fd, 5000ms));
  for (const int fd : stalled) ::close(fd);
  for (const int fd : silent) ::close(fd);
  INFO("RSS before " << rss_before << ", during " << rss_during);
  CHECK(rss_during < rss_before + (10u << 20));  // 400 x 1 MiB announced: 400 MB before the fix
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (nodes[0]->transport.counters().rejected_connections < flood + silent.size() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(nodes[0]->transport.counters().rejected_connections == flood + silent.size());
  CHECK(nodes[0]->failures.empty());
  CHECK(nodes[1]->failures.empty());
  nodes[1]->transport.send(0, Message{0, 1, 8, 0, pattern(64, 6)});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 2; }));
  shutdown_all(nodes);
}

TEST_CASE("a stranger's frame header over 4 KiB is refused before its bytes arrive",
          "[net][pre_auth]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(1, {}, &ports);
  nodes[0]->transport.start();
  // 4 KiB + 1 announced before any proof: the node closes at the prefix.
  const int fd = dial_raw(ports[0]);
  const auto prefix = to_bytes({4097, 0}, {});
  REQUIRE(::send(fd, prefix.data(), prefix.size(), 0) == static_cast<ssize_t>(prefix.size()));
  CHECK(closed_within(fd, 2000ms));
  ::close(fd);
  CHECK(nodes[0]->transport.counters().rejected_connections == 1);
  nodes[0]->transport.shutdown(1.0);
}

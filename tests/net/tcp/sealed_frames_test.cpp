// Tests of sealed frames (issue 26 item 5; net/tcp/frame_cipher.h, Connection::start_sealing):
// with a job secret every frame after the authentication goes encrypted and authenticated, a
// frame altered on the way closes its connection and is counted, and both ends must agree on
// security.encrypt. A relay between two transports (127.0.0.2 -> 127.0.0.1, through the
// transport's resolver) records and alters the bytes on the wire.

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "net/frame.h"
#include "net/tcp/connection.h"
#include "net/tcp/frame_cipher.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace gradmesh::net::testing;
using gradmesh::net::detail::kMaxSealedFragmentBytes;
using namespace std::chrono_literals;

namespace {

int listen_on(const char* ip, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  REQUIRE(::inet_pton(AF_INET, ip, &address.sin_addr) == 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  return fd;
}

// Forwards one TCP connection from 127.0.0.2:port to 127.0.0.1:port on a thread of its own,
// recording what goes upstream (dialer -> acceptor) and flipping one bit of it when armed.
class Relay {
 public:
  explicit Relay(std::uint16_t port) : listener_(listen_on("127.0.0.2", port)), port_(port) {
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Flips bit 0 of the upstream byte `offset` bytes past what has gone up so far (call while
  // nothing is on the way up: the next upstream bytes are then the next frame's).
  void flip_after(std::size_t offset) {
    const std::lock_guard lock(mutex_);
    flip_at_ = up_.size() + offset;
  }
  // Whether `needle` went upstream in clear.
  bool carried(std::span<const std::byte> needle) {
    const std::lock_guard lock(mutex_);
    return std::search(up_.begin(), up_.end(), needle.begin(), needle.end()) != up_.end();
  }
  std::size_t upstream_bytes() {
    const std::lock_guard lock(mutex_);
    return up_.size();
  }

 private:
  // Serves one connection at a time, as long as the test runs (a dialer may come again).
  void run() {
    while (!stop_) serve_one();
  }

  void serve_one() {
    pollfd accept_poll{listener_, POLLIN, 0};
    if (::poll(&accept_poll, 1, 20) <= 0) return;
    const int down = ::accept(listener_, nullptr, nullptr);
    if (down < 0) return;
    // The acceptor may not listen yet: dial it until it does (3 s at most).
    int up = -1;
    for (int attempt = 0; attempt < 150 && !stop_; ++attempt) {
      up = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(port_);
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(up, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) break;
      ::close(up);
      up = -1;
      std::this_thread::sleep_for(20ms);
    }
    if (up >= 0) forward(down, up);
    ::close(down);
    if (up >= 0) ::close(up);
  }

  void forward(int down, int up) {
    std::vector<std::byte> buffer(64 * 1024);
    pollfd fds[2] = {{down, POLLIN, 0}, {up, POLLIN, 0}};
    while (!stop_) {
      if (::poll(fds, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
        if (n <= 0) return;
        if (i == 0) {  // upstream: record, and alter when armed
          const std::lock_guard lock(mutex_);
          const std::size_t begin = up_.size();
          if (flip_at_ >= begin && flip_at_ < begin + static_cast<std::size_t>(n))
            buffer[flip_at_ - begin] ^= std::byte{1};
          up_.insert(up_.end(), buffer.begin(), buffer.begin() + n);
        }
        const int to = i == 0 ? up : down;
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = ::write(to, buffer.data() + sent, static_cast<std::size_t>(n - sent));
          if (w <= 0) return;
          sent += w;
        }
      }
    }
  }

  int listener_;
  std::uint16_t port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::byte> up_;
  std::size_t flip_at_ = static_cast<std::size_t>(-1);
};

// Two transports, rank 1 reaching rank 0 through a Relay: rank 0's entry is "node0:port", which
// rank 0 resolves to 127.0.0.1 and rank 1 to 127.0.0.2 (the relay).
struct RelayedPair {
  explicit RelayedPair(bool encrypt, const char* secret = "s3cret") {
    const auto ports = free_ports(2);
    relay = std::make_unique<Relay>(ports[0]);
    nodes = make_nodes(2, [&](TransportOptions& o) {
      o.peers = {{"node0", ports[0]}, {"127.0.0.1", ports[1]}};
      o.secret = secret;
      o.encrypt = encrypt;
      const bool relayed = o.rank == 1;
      o.resolver = [relayed](const std::string& host) {
        return std::vector<std::string>{host == "node0" && relayed ? "127.0.0.2" : "127.0.0.1"};
      };
    });
    start_all_ok(nodes);
  }
  std::unique_ptr<Relay> relay;
  Nodes nodes;
};

std::vector<std::byte> slice(const Payload& payload, std::size_t begin, std::size_t bytes) {
  const auto all = payload.bytes();
  return {all.begin() + static_cast<std::ptrdiff_t>(begin),
          all.begin() + static_cast<std::ptrdiff_t>(begin + bytes)};
}

// Sealed wire bytes of `message` on a connection cutting data at `fragment` payload bytes.
std::size_t sealed_wire_bytes(const Message& message, std::size_t fragment) {
  auto frame = encode_data(message);
  frame->add_tags(auth::kTagBytes);
  frame->fragment(fragment);
  return frame->wire_bytes();
}

}  // namespace

TEST_CASE("a sealed frame's layout: a tag after each header and each payload, fragments tile it",
          "[net][frame][cipher]") {
  const Message message{1, 3, 9, 2, pattern(100, 1)};
  auto plain = encode_data(message);
  auto sealed = encode_data(message);
  sealed->add_tags(auth::kTagBytes);
  CHECK(sealed->wire_bytes() == plain->wire_bytes() + 2 * auth::kTagBytes);
  CHECK(sealed->fragment_at(0).wire_size() == sealed->wire_bytes());
  sealed->fragment(30);  // 30 + 30 + 30 + 10, each with two tags
  CHECK(sealed->wire_bytes() ==
        plain->wire_bytes() + 3 * data_more_head_bytes() + 8 * auth::kTagBytes);
  std::size_t wire_next = 0, payload_next = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    const OutgoingFrame::Fragment piece = sealed->fragment_at(wire_next);
    INFO("fragment " << k);
    CHECK(piece.wire_begin == wire_next);
    CHECK(piece.payload_begin == payload_next);
    CHECK(piece.tag_bytes == auth::kTagBytes);
    CHECK(sealed->fragment_at(piece.wire_end() - 1).wire_begin == wire_next);
    wire_next = piece.wire_end();
    payload_next = piece.payload_end;
  }
  CHECK(wire_next == sealed->wire_bytes());
  CHECK(payload_next == 100);
  // A frame without a payload has one tag (its header's); raw bytes are never sealed.
  auto heartbeat = encode_heartbeat(0);
  const std::size_t clear = heartbeat->wire_bytes();
  heartbeat->add_tags(auth::kTagBytes);
  CHECK(heartbeat->wire_bytes() == clear + auth::kTagBytes);
  const std::byte junk[3] = {};
  CHECK_THROWS_AS(OutgoingFrame::raw(junk, 0)->add_tags(auth::kTagBytes), gradmesh::ContractError);
}

TEST_CASE(
    "with a job secret frames go sealed: no plaintext on the wire, messages arrive whole, "
    "both ends count the same bytes",
    "[net][transport][cipher]") {
  for (const bool encrypt : {true, false}) {
    DYNAMIC_SECTION("security.encrypt = " << encrypt) {
      RelayedPair pair(encrypt);
      auto& nodes = pair.nodes;
      // Several messages each way, one longer than a sealed fragment (cut at 1 MiB).
      const std::size_t sizes[] = {0, 1, 1000, 3 * kMaxSealedFragmentBytes + 5, 70000};
      unsigned seed = 0;
      for (const std::size_t bytes : sizes) {
        ++seed;
        nodes[1]->transport.send(0, Message{0, 0, seed, 0, pattern(bytes, seed)});
        nodes[0]->transport.send(1, Message{1, 0, seed, 0, pattern(bytes, seed + 50)});
      }
      for (std::size_t r = 0; r < 2; ++r)
        REQUIRE(nodes[r]->wait([](Node& n) { return n.received.size() == 5; }, 10s));
      for (std::size_t i = 0; i < 5; ++i) {
        INFO("message " << i);
        CHECK(has_pattern(nodes[0]->received[i].second.payload, sizes[i], i + 1));
        CHECK(has_pattern(nodes[1]->received[i].second.payload, sizes[i], i + 51));
      }
      // 64 bytes of the long message in clear are on the wire only without encryption.
      CHECK(pair.relay->carried(slice(pattern(sizes[3], 4), 2'000'000, 64)) == !encrypt);
      // Both ends count every wire byte of the "push" messages (1 -> 0): sealed, each fragment
      // of at most 1 MiB with a tag after its header and one after its payload.
      std::size_t expected = 0;
      for (std::size_t i = 0; i < 5; ++i) {
        const Message m{0, 0, i + 1, 0, pattern(sizes[i], static_cast<unsigned>(i + 1))};
        expected +=
            encrypt ? sealed_wire_bytes(m, kMaxSealedFragmentBytes) : encode_data(m)->wire_bytes();
      }
      const Counters sent = nodes[1]->transport.counters();
      const Counters got = nodes[0]->transport.counters();
      CHECK(got.bytes_received_by_lane.at("push") == expected);
      CHECK(sent.bytes_sent_by_lane.at("push") == expected);
      CHECK(got.unverified_frames == 0);
      CHECK(got.malformed_frames == 0);
      shutdown_all(nodes);
    }
  }
}

TEST_CASE(
    "a bit flipped on the wire in a sealed frame closes the connection and is counted, "
    "nothing altered is delivered",
    "[net][transport][cipher]") {
  const Message message{0, 0, 7, 0, pattern(50000, 7)};
  const std::size_t header = encode_data(message)->head().size() - kPrefixBytes;
  const struct {
    const char* part;
    std::size_t offset;  // within the frame's wire bytes
  } targets[] = {{"prefix", 0},
                 {"header", kPrefixBytes + header / 2},
                 {"header tag", kPrefixBytes + header + 3},
                 {"payload", kPrefixBytes + header + auth::kTagBytes + 20000},
                 {"payload tag", kPrefixBytes + header + auth::kTagBytes + 50000 + 5}};
  for (const auto& target : targets) {
    DYNAMIC_SECTION("flipped in the " << target.part) {
      RelayedPair pair(true);
      auto& nodes = pair.nodes;
      pair.relay->flip_after(target.offset);
      nodes[1]->transport.send(0, message);
      REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }, 5s));
      CHECK(nodes[0]->failures[0].rank() == 1);
      CHECK_THAT(nodes[0]->failures[0].what(), Catch::Contains("did not verify"));
      CHECK(nodes[0]->transport.counters().unverified_frames == 1);
      CHECK(nodes[0]->received.empty());
      // The sender sees its connection drop.
      REQUIRE(nodes[1]->wait([](Node& n) { return !n.failures.empty(); }, 5s));
      for (auto& n : nodes) n->transport.close();
    }
  }
  SECTION("without encryption the same flip goes unseen: the payload arrives altered") {
    RelayedPair pair(false);
    auto& nodes = pair.nodes;
    pair.relay->flip_after(kPrefixBytes + header + 20000);
    nodes[1]->transport.send(0, message);
    REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }, 5s));
    const Payload& got = nodes[0]->received[0].second.payload;
    CHECK_FALSE(has_pattern(got, 50000, 7));
    CHECK(got.bytes()[20000] == (pattern(50000, 7).bytes()[20000] ^ std::byte{1}));
    CHECK(nodes[0]->transport.counters().unverified_frames == 0);
    shutdown_all(nodes);
  }
}

TEST_CASE(
    "3 nodes: the node that closes a connection on a frame that did not verify tells the third "
    "why, and the third's failure of that peer names it",
    "[net][transport][cipher]") {
  // Rank 1 reaches rank 0 through the relay; rank 2 reaches both directly.
  const auto ports = free_ports(3);
  Relay relay(ports[0]);
  auto nodes = make_nodes(3, [&](TransportOptions& o) {
    o.peers = {{"node0", ports[0]}, {"127.0.0.1", ports[1]}, {"127.0.0.1", ports[2]}};
    o.secret = "s3cret";
    o.encrypt = true;
    const bool relayed = o.rank == 1;
    o.resolver = [relayed](const std::string& host) {
      return std::vector<std::string>{host == "node0" && relayed ? "127.0.0.2" : "127.0.0.1"};
    };
  });
  start_all_ok(nodes);
  const Message message{0, 0, 7, 0, pattern(5000, 7)};
  const std::size_t header = encode_data(message)->head().size() - kPrefixBytes;
  relay.flip_after(kPrefixBytes + header + auth::kTagBytes + 100);
  nodes[1]->transport.send(0, message);
  REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }, 5s));
  CHECK_THAT(nodes[0]->failures[0].what(), Catch::Contains("did not verify"));
  // The notice travels on rank 0's connection to rank 2, ahead of anything rank 1 says: once
  // rank 1 is gone, rank 2 names rank 0's reason beside its own.
  std::this_thread::sleep_for(500ms);  // loopback delivers it in well under 1 ms
  nodes[1]->transport.close();
  REQUIRE(nodes[2]->wait([](Node& n) { return !n.failures.empty(); }, 5s));
  CHECK(nodes[2]->failures[0].rank() == 1);
  CHECK_THAT(nodes[2]->failures[0].what(),
             Catch::Contains("rank 0 (node0:" + std::to_string(ports[0]) +
                             ") closed its connection to it first: ") &&
                 Catch::Contains("did not verify"));
  CHECK(nodes[2]->transport.counters().malformed_frames == 0);
  for (auto& n : nodes) n->transport.close();
}

TEST_CASE("a frame in clear on a sealed connection does not verify", "[net][transport][cipher]") {
  auto nodes = make_nodes(2, [](TransportOptions& o) { o.secret = "s3cret"; });
  start_all_ok(nodes);
  // A well-formed Heartbeat in clear, and 16 bytes where its tag would be.
  const auto heartbeat = encode_heartbeat(0);
  std::vector<std::byte> bytes(heartbeat->head().begin(), heartbeat->head().end());
  bytes.resize(bytes.size() + auth::kTagBytes);
  nodes[1]->transport.send_raw_for_testing(0, bytes);
  REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }, 5s));
  CHECK_THAT(nodes[0]->failures[0].what(), Catch::Contains("header did not verify"));
  CHECK(nodes[0]->transport.counters().unverified_frames == 1);
  for (auto& n : nodes) n->transport.close();
}

TEST_CASE("nodes that disagree on security.encrypt refuse each other, naming the key",
          "[net][transport][cipher]") {
  for (const std::size_t encrypting : {0u, 1u}) {
    DYNAMIC_SECTION("rank " << encrypting << " encrypts") {
      auto nodes = make_nodes(2, [&](TransportOptions& o) {
        o.connect_timeout_s = 1.0;
        o.secret = "s3cret";
        o.encrypt = o.rank == encrypting;
      });
      const auto errors = start_all(nodes);
      const std::string expected = "rank " + std::to_string(encrypting) +
                                   " encrypts its frames, rank " + std::to_string(1 - encrypting) +
                                   " does not";
      for (std::size_t r = 0; r < 2; ++r) {
        REQUIRE(errors[r] != nullptr);
        CHECK_THAT(message_of(errors[r]), Catch::Contains(expected));
        CHECK_THAT(message_of(errors[r]), Catch::Contains("security.encrypt"));
      }
    }
  }
}

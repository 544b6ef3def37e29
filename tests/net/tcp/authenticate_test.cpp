// Tests for net/tcp/auth.h and net/tcp/authenticate.cpp: who may join a job. Transports as threads
// of one process on 127.0.0.1; raw sockets play hosts that are not gradmesh nodes of the job.

#include "net/tcp/auth.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "net/tcp/handshake.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace gradmesh::net::testing;

namespace {

auth::Transcript transcript(auth::Side side, const auth::Nonce& own, const auth::Nonce& theirs,
                            std::size_t own_rank = 1, std::size_t their_rank = 0) {
  return {side, &own, &theirs, "job", own_rank, their_rank};
}

// Sends `frame` on a raw connection to 127.0.0.1:port and reads the node's whole answer (until it
// closes the connection, at most 2 s); returns its first frame's header bytes (empty if none).
std::vector<std::byte> exchange_raw(std::uint16_t port, const OutgoingFrame& frame) {
  const int fd = dial_raw(port);
  REQUIRE(::send(fd, frame.head().data(), frame.head().size(), 0) ==
          static_cast<ssize_t>(frame.head().size()));
  std::vector<std::byte> reply(4096);
  std::size_t got = 0;
  for (ssize_t n;
       got < reply.size() && (n = ::recv(fd, reply.data() + got, reply.size() - got, 0)) > 0;)
    got += static_cast<std::size_t>(n);
  ::close(fd);
  if (got < kPrefixBytes) return {};
  const FramePrefix prefix = decode_prefix(std::span(reply).first<kPrefixBytes>());
  REQUIRE(got >= kPrefixBytes + prefix.header_bytes);
  return {reply.begin() + kPrefixBytes, reply.begin() + kPrefixBytes + prefix.header_bytes};
}

std::string refusal_of(const std::vector<std::byte>& header) {
  const HeaderCheck check = verify_header(header, 0);
  REQUIRE(check.header != nullptr);
  REQUIRE(check.header->body_type() == schema::Body::Refuse);
  return check.header->body_as_Refuse()->reason()->str();
}

void wait_rejected(TcpTransport& transport, std::uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (transport.counters().rejected_connections < count &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
}

}  // namespace

// ---------------------------------------------------------------- the MAC (auth.h)

TEST_CASE("a proof verifies only under the same secret, side, nonces, job and ranks",
          "[net][auth]") {
  const auth::Key key("correct horse battery staple");
  const auth::Nonce a = auth::make_nonce();
  const auth::Nonce b = auth::make_nonce();
  CHECK(a != b);
  const auto t = transcript(auth::Side::kDialer, a, b);
  const auth::Mac mac = auth::prove(key, t);
  CHECK(auth::verify(key, t, mac));

  CHECK_FALSE(auth::verify(auth::Key("correct horse battery stapler"), t, mac));
  // Reflected: the same bytes as the other side's proof, or with the nonces swapped.
  CHECK_FALSE(auth::verify(key, transcript(auth::Side::kAcceptor, a, b), mac));
  CHECK_FALSE(auth::verify(key, transcript(auth::Side::kDialer, b, a), mac));
  CHECK_FALSE(auth::verify(key, transcript(auth::Side::kDialer, a, b, 2, 0), mac));
  CHECK_FALSE(auth::verify(key, transcript(auth::Side::kDialer, a, b, 0, 1), mac));
  auto other_job = t;
  other_job.job_name = "jo";
  CHECK_FALSE(auth::verify(key, other_job, mac));
  CHECK_FALSE(auth::verify(key, t, std::span(mac).first(auth::kMacBytes - 1)));
  CHECK_FALSE(auth::verify(key, t, {}));
  // A secret of any length gives a key.
  const std::string long_secret(100000, 'x');
  CHECK(auth::verify(auth::Key(long_secret), t, auth::prove(auth::Key(long_secret), t)));
}

TEST_CASE("the Challenge checks name what differs", "[net][auth]") {
  auth::ChallengeFields theirs;
  theirs.rank = 2;
  CHECK(check_challenge(theirs, 0, 3, false, false).empty());
  theirs.protocol_version = 3;
  CHECK_THAT(check_challenge(theirs, 0, 3, false, false),
             Catch::Contains("protocol version differs: ours " + std::to_string(kProtocolVersion) +
                             ", theirs 3"));
  theirs.protocol_version = kProtocolVersion;
  CHECK_THAT(check_challenge(theirs, 0, 2, false, false), Catch::Contains("rank 2 out of range"));
  CHECK_THAT(check_challenge(theirs, 2, 3, false, false), Catch::Contains("must not dial rank 2"));
  // A node that rejoins dials every rank, higher ones too, but never claims the acceptor's.
  theirs.rejoin = true;
  theirs.rank = 0;
  CHECK(check_challenge(theirs, 1, 3, false, false).empty());
  CHECK_THAT(check_challenge(theirs, 0, 3, false, false), Catch::Contains("this node's own rank"));
  theirs.rejoin = false;
  CHECK_THAT(check_challenge(theirs, 1, 3, false, false), Catch::Contains("must not dial rank 1"));
  theirs.rank = 2;
  CHECK_THAT(check_challenge(theirs, 0, 3, true, false),
             Catch::Contains("rank 0 has a job secret, rank 2 has none"));
  theirs.secret = true;
  CHECK_THAT(check_challenge(theirs, 0, 3, false, false),
             Catch::Contains("rank 2 has a job secret, rank 0 has none"));
  CHECK_THAT(check_acceptor_challenge(theirs, 3, 1, true, false),
             Catch::Contains("answered as rank 2"));
  // Both ends seal their frames, or neither does.
  CHECK(check_challenge(theirs, 0, 3, true, false).empty());
  CHECK_THAT(check_challenge(theirs, 0, 3, true, true),
             Catch::Contains("rank 0 encrypts its frames, rank 2 does not") &&
                 Catch::Contains("security.encrypt"));
  theirs.encrypt = true;
  CHECK(check_challenge(theirs, 0, 3, true, true).empty());
  CHECK_THAT(check_acceptor_challenge(theirs, 3, 2, true, false),
             Catch::Contains("rank 2 encrypts its frames, rank 3 does not"));
}

// ---------------------------------------------------------------- transports

TEST_CASE("nodes with the same secret connect both ways and exchange frames", "[net][auth]") {
  auto nodes = make_nodes(3, [](TransportOptions& o) { o.secret = "s3cret\nwith any bytes"; });
  start_all_ok(nodes);
  nodes[0]->transport.send(2, Message{0, 0, 1, 0, pattern(100, 1)});
  nodes[2]->transport.send(0, Message{1, 0, 2, 0, pattern(100, 2)});
  REQUIRE(nodes[2]->wait([](Node& n) { return n.received.size() == 1; }, 2s));
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }, 2s));
  CHECK(has_pattern(nodes[2]->received[0].second.payload, 100, 1));
  for (auto& n : nodes) CHECK(n->transport.counters().rejected_connections == 0);
  shutdown_all(nodes);
}

TEST_CASE("a wrong secret is refused on both sides, naming the rank and why", "[net][auth]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      2,
      [](TransportOptions& o) {
        o.connect_timeout_s = 1.0;
        o.secret = o.rank == 0 ? "Secret-Of-Rank-0" : "Secret-Of-Rank-1";
      },
      &ports);
  const auto start = std::chrono::steady_clock::now();
  const auto errors = start_all(nodes);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  REQUIRE(errors[0] != nullptr);
  REQUIRE(errors[1] != nullptr);
  // The dialer (rank 1) checks the acceptor's proof first and refuses it at once.
  const std::string dialer = message_of(errors[1]);
  CHECK_THAT(dialer, Catch::Contains("peer rank 0"));
  CHECK_THAT(dialer, Catch::Contains("rank 0 failed to prove the job secret"));
  // The acceptor is told why, counts the refused connection and names rank 1 at its timeout.
  const std::string acceptor = message_of(errors[0]);
  CHECK_THAT(acceptor, Catch::Contains("rank 1 (127.0.0.1:" + std::to_string(ports[1]) + ")"));
  CHECK_THAT(acceptor, Catch::Contains("failed to prove the job secret"));
  CHECK(nodes[0]->transport.counters().rejected_connections >= 1);
  for (const std::string& what : {dialer, acceptor})  // secrets are never in messages
    CHECK(what.find("Secret-Of") == std::string::npos);
}

TEST_CASE("a secret on one side only is refused on both sides", "[net][auth]") {
  for (const std::size_t with_secret : {0u, 1u}) {
    DYNAMIC_SECTION("secret on rank " << with_secret) {
      auto nodes = make_nodes(2, [&](TransportOptions& o) {
        o.connect_timeout_s = 1.0;
        if (o.rank == with_secret) o.secret = "s3cret";
      });
      const auto start = std::chrono::steady_clock::now();
      const auto errors = start_all(nodes);
      CHECK(std::chrono::steady_clock::now() - start < 3s);
      const std::string expected = "rank " + std::to_string(with_secret) +
                                   " has a job secret, rank " + std::to_string(1 - with_secret) +
                                   " has none";
      for (std::size_t r = 0; r < 2; ++r) {
        REQUIRE(errors[r] != nullptr);
        CHECK_THAT(message_of(errors[r]), Catch::Contains(expected));
        CHECK_THAT(message_of(errors[r]), Catch::Contains("peer rank " + std::to_string(1 - r)));
      }
      CHECK(nodes[0]->transport.counters().rejected_connections >= 1);
    }
  }
}

TEST_CASE("a Challenge for a rank already live is refused, the node keeps running", "[net][auth]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      2, [](TransportOptions& o) { o.secret = "s3cret"; }, &ports);
  start_all_ok(nodes);
  const auto challenge = auth::encode_challenge(1, auth::make_nonce(), true, {}, 0, false,
                                                /*encrypt=*/true);
  CHECK_THAT(refusal_of(exchange_raw(ports[0], *challenge)),
             Catch::Contains("rank 1 is already connected"));
  wait_rejected(nodes[0]->transport, 1);
  CHECK(nodes[0]->transport.counters().rejected_connections == 1);

  nodes[1]->transport.send(0, Message{0, 0, 9, 0, pattern(3, 3)});
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 1; }, 2s));
  CHECK(nodes[0]->failures.empty());
  shutdown_all(nodes);
}

TEST_CASE("a host without the secret, or of an older protocol, is refused and named",
          "[net][auth]") {
  std::vector<std::uint16_t> ports;
  auto nodes = make_nodes(
      2,
      [](TransportOptions& o) {
        o.secret = "s3cret";
        o.connect_timeout_s = 1.5;
      },
      &ports);
  nodes.pop_back();  // rank 1's place is taken by raw sockets while rank 0 waits for it
  auto started = std::async(std::launch::async, [&] { nodes[0]->transport.start(); });
  std::this_thread::sleep_for(200ms);
  const auto no_secret = auth::encode_challenge(1, auth::make_nonce(), false, {}, 0);
  CHECK_THAT(refusal_of(exchange_raw(ports[0], *no_secret)),
             Catch::Contains("rank 0 has a job secret, rank 1 has none"));
  HelloFields hello;  // what a node of protocol version 3 sends first
  hello.protocol_version = 3;
  hello.rank = 1;
  CHECK_THAT(
      refusal_of(exchange_raw(ports[0], *encode_hello(hello, 0))),
      Catch::Contains("expected a Challenge (protocol version " + std::to_string(kProtocolVersion) +
                      "), got a Hello of protocol version 3"));
  wait_rejected(nodes[0]->transport, 2);
  CHECK(nodes[0]->transport.counters().rejected_connections == 2);
  try {
    started.get();
    FAIL("start() returned without rank 1");
  } catch (const PeerError& e) {
    CHECK(e.rank() == 1);
    CHECK_THAT(e.what(), Catch::Contains("[refused: expected a Challenge"));
  }
}

TEST_CASE("a node listens on its own peer-list address only", "[net][auth]") {
  const auto ports = free_ports(1);
  TransportOptions options = options_for(0, ports);
  options.peers[0].host = "127.0.0.2";
  TcpTransport transport(std::move(options));
  transport.start();  // one node: nothing to wait for
  const auto connects = [&](const char* host) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(ports[0]);
    REQUIRE(::inet_pton(AF_INET, host, &address.sin_addr) == 1);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    ::close(fd);
    return ok;
  };
  CHECK(connects("127.0.0.2"));
  CHECK_FALSE(connects("127.0.0.1"));
  transport.shutdown(1.0);
}

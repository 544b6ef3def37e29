// Tests of cut frames (issue 31: every wait scales with the link): a data message longer than an
// eighth of the peer timeout at its link's measured rate goes in fragments (Data, then DataMore
// frames; OutgoingFrame::fragment, TcpTransport::set_link_rates), arrives whole, and lets control
// frames go between its fragments; a receiver refuses fragments out of order.

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "net/frame.h"
#include "tests/net/tcp/transport_fixture.h"

using namespace gradmesh::net;
using namespace gradmesh::net::testing;
using namespace std::chrono_literals;

namespace {

// Wire bytes of `message` cut into fragments of `fragment` payload bytes.
std::size_t cut_wire_bytes(const Message& message, std::size_t fragment) {
  auto frame = encode_data(message);
  frame->fragment(fragment);
  return frame->wire_bytes();
}

}  // namespace

TEST_CASE(
    "a frame cut into fragments: the first keeps the Data header, the rest are DataMore, "
    "the pieces tile the payload",
    "[net][frame][fragment]") {
  const Message message{1, 3, 9, 2, pattern(100, 1)};
  auto whole = encode_data(message);
  const std::size_t head = whole->head().size();
  auto cut = encode_data(message);
  cut->fragment(30);  // 30 + 30 + 30 + 10
  REQUIRE(cut->fragments() == 4);
  CHECK(cut->wire_bytes() == whole->wire_bytes() + 3 * data_more_head_bytes());
  std::size_t payload_next = 0, wire_next = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    const OutgoingFrame::Fragment piece = cut->fragment_at(wire_next);
    INFO("fragment " << k);
    CHECK(piece.wire_begin == wire_next);
    CHECK(piece.payload_begin == payload_next);
    CHECK(piece.payload_end == std::min<std::size_t>(100, payload_next + 30));
    CHECK(cut->fragment_at(piece.wire_end() - 1).wire_begin == wire_next);  // its last byte
    // Each head is a frame of its own: its prefix announces its header and its payload slice.
    const FramePrefix prefix =
        decode_prefix(std::span<const std::byte, kPrefixBytes>(piece.head.data(), kPrefixBytes));
    CHECK(prefix.header_bytes + kPrefixBytes == piece.head.size());
    CHECK(prefix.payload_bytes == piece.payload_end - piece.payload_begin);
    const HeaderCheck check = verify_header(piece.head.subspan(kPrefixBytes), 4);
    REQUIRE(check.header != nullptr);
    if (k == 0) {
      CHECK(piece.head.size() == head);
      REQUIRE(check.header->body_type() == schema::Body::Data);
      CHECK(check.header->body_as_Data()->message_bytes() == 100);
      CHECK(check.header->body_as_Data()->key() == 9);
    } else {
      CHECK(check.header->body_type() == schema::Body::DataMore);
      CHECK(piece.head.size() == data_more_head_bytes());
    }
    payload_next = piece.payload_end;
    wire_next = piece.wire_end();
  }
  CHECK(wire_next == cut->wire_bytes());
  CHECK(payload_next == 100);

  auto small = encode_data(message);
  small->fragment(100);  // fits in one: not cut
  CHECK(small->fragments() == 1);
  CHECK(small->wire_bytes() == whole->wire_bytes());
  CHECK_THROWS_AS(encode_heartbeat(2)->fragment(10), gradmesh::ContractError);
}

TEST_CASE(
    "a message cut into fragments arrives whole, once, between others, and both ends count "
    "every fragment's bytes",
    "[net][transport][fragment]") {
  // peer_timeout 8 s, a link of 20,000 bytes/s to one peer: fragments of 20,000 x 8 / 8 bytes.
  auto nodes = make_nodes(2, [](TransportOptions& o) { o.peer_timeout_s = 8.0; });
  start_all_ok(nodes);
  nodes[1]->transport.set_link_rates({20000.0, 0.0});
  CHECK(nodes[1]->transport.fragment_bytes(0) == 20000);
  CHECK(nodes[0]->transport.fragment_bytes(1) == 0);  // not given: not cut
  constexpr std::size_t kLarge = 1 << 20;
  nodes[1]->transport.send(0, Message{0, 1, 1, 0, pattern(kLarge, 3)});
  nodes[1]->transport.send(0, Message{1, 2, 2, 0, pattern(100, 4)});
  nodes[1]->transport.send(0, Message{0, 1, 3, 0, pattern(kLarge + 7, 5)});
  nodes[0]->transport.send(1, Message{1, 4, 4, 0, pattern(kLarge, 6)});  // the other way: whole
  REQUIRE(nodes[0]->wait([](Node& n) { return n.received.size() == 3; }));
  REQUIRE(nodes[1]->wait([](Node& n) { return n.received.size() == 1; }));
  {
    const std::lock_guard lock(nodes[0]->mutex);
    const auto& got = nodes[0]->received;
    CHECK(got[0].second.key == 1);
    CHECK(has_pattern(got[0].second.payload, kLarge, 3));
    CHECK(got[1].second.key == 2);
    CHECK(has_pattern(got[1].second.payload, 100, 4));
    CHECK(got[2].second.key == 3);
    CHECK(has_pattern(got[2].second.payload, kLarge + 7, 5));
  }
  CHECK(has_pattern(nodes[1]->received[0].second.payload, kLarge, 6));
  const std::size_t push_wire = cut_wire_bytes(Message{0, 1, 1, 0, pattern(kLarge, 3)}, 20000) +
                                cut_wire_bytes(Message{0, 1, 3, 0, pattern(kLarge + 7, 5)}, 20000);
  const Counters sent = nodes[1]->transport.counters();
  const Counters received = nodes[0]->transport.counters();
  CHECK(sent.bytes_sent_by_lane.at("push") == push_wire);
  CHECK(received.bytes_received_by_lane.at("push") == push_wire);
  CHECK(received.malformed_frames == 0);
  shutdown_all(nodes);
  CHECK(nodes[0]->failures.empty());
  CHECK(nodes[1]->failures.empty());
}

TEST_CASE("an Abort goes between the fragments of a long message on a slow link",
          "[net][transport][fragment]") {
  // The sender is capped at 200 kB/s and its peer timeout is 0.8 s: fragments of
  // 200,000 x 0.8 / 8 = 20,000 bytes (0.1 s each). A 2 MB message holds the link 10 s. Its Abort,
  // queued 0.3 s in, must reach the peer before abort_for()'s 1 s wait for it ends: whole, the
  // frame would hold it 9.7 s more and the peer would see only the connection close. Sealed
  // (a job secret), each fragment and the Abort between two of them open in wire order.
  for (const bool sealed : {false, true}) {
    DYNAMIC_SECTION((sealed ? "sealed" : "in clear")) {
      auto nodes = make_nodes(2, [&](TransportOptions& o) {
        o.peer_timeout_s = 0.8;
        if (o.rank == 1) o.max_send_rate = 200e3;
        if (sealed) o.secret = "s3cret";
      });
      start_all_ok(nodes);
      nodes[1]->transport.set_link_rates({1e9, 0.0});  // the cap, not the link, is the rate
      CHECK(nodes[1]->transport.fragment_bytes(0) == 20000);
      nodes[1]->transport.send(0, Message{0, 1, 1, 0, pattern(2'000'000, 7)});
      std::this_thread::sleep_for(300ms);
      nodes[1]->transport.abort_for("a test's abort", std::nullopt);
      REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }, 5s));
      const std::lock_guard lock(nodes[0]->mutex);
      CHECK_THAT(nodes[0]->failures[0].what(), Catch::Contains("aborted the job: a test's abort"));
      CHECK(nodes[0]->received.empty());  // the message never completed
      CHECK(nodes[0]->transport.counters().unverified_frames == 0);
    }
  }
}

TEST_CASE("fragments out of order break the connection, naming why", "[net][transport][fragment]") {
  SECTION("a DataMore frame without a cut message in progress") {
    auto nodes = make_nodes(2);
    start_all_ok(nodes);
    auto cut = encode_data(Message{0, 1, 1, 0, pattern(64, 1)});
    cut->fragment(32);
    const OutgoingFrame::Fragment second = cut->fragment_at(cut->fragment_at(0).wire_end());
    std::vector<std::byte> raw(second.head.begin(), second.head.end());
    const auto payload = cut->payload().bytes();
    raw.insert(raw.end(), payload.begin() + 32, payload.end());
    nodes[1]->transport.send_raw_for_testing(0, raw);
    REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }));
    const std::lock_guard lock(nodes[0]->mutex);
    CHECK_THAT(nodes[0]->failures[0].what(),
               Catch::Contains("DataMore frame without a cut message in progress"));
  }
  SECTION("a Data frame between the fragments of a cut message") {
    auto nodes = make_nodes(2);
    start_all_ok(nodes);
    auto cut = encode_data(Message{0, 1, 1, 0, pattern(64, 1)});
    cut->fragment(32);
    const OutgoingFrame::Fragment first = cut->fragment_at(0);
    std::vector<std::byte> raw(first.head.begin(), first.head.end());
    const auto payload = cut->payload().bytes();
    raw.insert(raw.end(), payload.begin(), payload.begin() + 32);
    auto other = encode_data(Message{0, 1, 2, 0, pattern(8, 2)});
    raw.insert(raw.end(), other->head().begin(), other->head().end());
    raw.insert(raw.end(), other->payload().bytes().begin(), other->payload().bytes().end());
    nodes[1]->transport.send_raw_for_testing(0, raw);
    REQUIRE(nodes[0]->wait([](Node& n) { return !n.failures.empty(); }));
    const std::lock_guard lock(nodes[0]->mutex);
    CHECK_THAT(nodes[0]->failures[0].what(),
               Catch::Contains("a Data frame came between the fragments of a cut message"));
    CHECK(nodes[0]->received.empty());
  }
}

// Tests for net/frame.h, net/handshake.h, net/payload.h and net/endpoint.h.

#include "net/frame.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "net/endpoint.h"
#include "net/tcp/handshake.h"

using namespace gradmesh::net;

namespace {
// Splits a frame's head into prefix and header.
FramePrefix prefix_of(const OutgoingFrame& frame) {
  return decode_prefix(frame.head().first<kPrefixBytes>());
}
std::span<const std::byte> header_of(const OutgoingFrame& frame) {
  return frame.head().subspan(kPrefixBytes);
}
}  // namespace

TEST_CASE("frame prefix round-trips little-endian", "[net][frame]") {
  std::array<std::byte, kPrefixBytes> bytes{};
  encode_prefix({0x04030201u, 0xa0b0c0d0u}, bytes);
  CHECK(bytes[0] == std::byte{0x01});
  CHECK(bytes[3] == std::byte{0x04});
  CHECK(bytes[4] == std::byte{0xd0});
  const FramePrefix prefix = decode_prefix(bytes);
  CHECK(prefix.header_bytes == 0x04030201u);
  CHECK(prefix.payload_bytes == 0xa0b0c0d0u);
  CHECK(prefix.frame_bytes() == 8ull + 0x04030201ull + 0xa0b0c0d0ull);
}

TEST_CASE("check_prefix bounds every frame, and handshake frames to a header alone",
          "[net][frame]") {
  const FramePrefix ok{100, 1000};
  CHECK(check_prefix(ok, 1108, false, 64).empty());  // exactly at the limit
  CHECK_THAT(check_prefix(ok, 1107, false, 64),
             Catch::Contains("1108 bytes") && Catch::Contains("max_frame_bytes 1107"));
  // Before the handshake: a header up to the limit, no payload.
  CHECK(check_prefix(FramePrefix{64, 0}, 1 << 20, true, 64).empty());
  CHECK_THAT(check_prefix(FramePrefix{65, 0}, 1 << 20, true, 64),
             Catch::Contains("65-byte header"));
  CHECK_THAT(check_prefix(FramePrefix{10, 1}, 1 << 20, true, 64),
             Catch::Contains("1-byte payload"));
  // The largest prefix does not overflow the sum.
  CHECK_FALSE(check_prefix(FramePrefix{0xffffffffu, 0xffffffffu}, 1u << 30, false, 64).empty());
}

TEST_CASE("data frame carries tags in a verified header and shares the payload", "[net][frame]") {
  const std::vector<float> values{1.0f, 2.5f, -3.0f};
  const auto bytes = std::as_bytes(std::span(values));
  Message message{2, 7, 0x1122334455667788ull, 42, Payload::view(bytes)};
  const auto frame = encode_data(message);
  CHECK(frame->payload().bytes().data() == bytes.data());  // no copy
  CHECK(frame->lane() == 2);
  CHECK(frame->role() == FrameRole::kData);
  const FramePrefix prefix = prefix_of(*frame);
  CHECK(prefix.payload_bytes == bytes.size());
  CHECK(prefix.header_bytes == header_of(*frame).size());
  CHECK(frame->wire_bytes() == kPrefixBytes + prefix.header_bytes + bytes.size());
  CHECK(frame->head().size() <= 160);  // a data header fits the inline buffer: one allocation

  const HeaderCheck check = verify_header(header_of(*frame), 3);
  REQUIRE(check.header != nullptr);
  REQUIRE(check.header->body_type() == schema::Body::Data);
  const auto* data = check.header->body_as_Data();
  CHECK(data->lane() == 2);
  CHECK(data->kind() == 7);
  CHECK(data->key() == 0x1122334455667788ull);
  CHECK(data->round() == 42);
}

TEST_CASE("verify_header rejects garbage, truncation and out-of-range lanes", "[net][frame]") {
  std::vector<std::byte> garbage(32);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(0xA5 ^ i);
  CHECK(verify_header(garbage, 4).header == nullptr);
  CHECK_FALSE(verify_header(garbage, 4).error.empty());
  CHECK(verify_header({}, 4).header == nullptr);

  const auto frame = encode_data(Message{3, 0, 0, 0, {}});
  const auto header = header_of(*frame);
  CHECK(verify_header(header, 4).header != nullptr);
  const HeaderCheck out_of_range = verify_header(header, 3);
  CHECK(out_of_range.header == nullptr);
  CHECK_THAT(out_of_range.error, Catch::Contains("lane 3 out of range"));
  CHECK(verify_header(header.first(header.size() - 4), 4).header == nullptr);
}

TEST_CASE("verify_header rejects a body type without its body", "[net][frame]") {
  // Found by tests/fuzz/frame_fuzz: the FlatBuffers Verifier passes such a header, and the receive
  // path dereferenced body_as_Hello() / body_as_Data() / body_as_Abort() of it.
  for (const schema::Body type : {schema::Body::Hello, schema::Body::HelloAck, schema::Body::Refuse,
                                  schema::Body::Data, schema::Body::Goodbye, schema::Body::Abort}) {
    INFO(schema::EnumNameBody(type));
    flatbuffers::FlatBufferBuilder builder;
    schema::HeaderBuilder header(builder);
    header.add_body_type(type);
    schema::FinishHeaderBuffer(builder, header.Finish());
    const auto bytes = std::as_bytes(std::span(builder.GetBufferPointer(), builder.GetSize()));
    const HeaderCheck check = verify_header(bytes, 4);
    CHECK(check.header == nullptr);
    CHECK_THAT(check.error, Catch::Equals(std::string("header of body type ") +
                                          schema::EnumNameBody(type) + " has no body"));
  }
}

TEST_CASE("control frames verify and decode", "[net][frame]") {
  HelloFields hello;
  hello.rank = 3;
  hello.job_name = "job";
  hello.config_hash = 0xabcdef;
  hello.peers = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"};
  hello.view = 2;
  hello.rejoin = true;
  const auto frame = encode_hello(hello, 9);
  CHECK(frame->lane() == 9);
  const HeaderCheck check = verify_header(header_of(*frame), 0);
  REQUIRE(check.header != nullptr);
  REQUIRE(check.header->body_type() == schema::Body::Hello);
  const HelloFields decoded = decode_hello(*check.header->body_as_Hello());
  CHECK(decoded.protocol_version == kProtocolVersion);
  CHECK(decoded.rank == 3);
  CHECK(decoded.job_name == "job");
  CHECK(decoded.config_hash == 0xabcdef);
  CHECK(decoded.peers == hello.peers);
  CHECK(decoded.view == 2);
  CHECK(decoded.rejoin);

  const auto refuse = encode_refuse("because", 0);
  CHECK(refuse->role() == FrameRole::kRefuse);
  const HeaderCheck refused = verify_header(header_of(*refuse), 0);
  REQUIRE(refused.header != nullptr);
  CHECK(refused.header->body_as_Refuse()->reason()->str() == "because");
  CHECK(verify_header(header_of(*encode_goodbye(0)), 0).header->body_type() ==
        schema::Body::Goodbye);
  CHECK(verify_header(header_of(*encode_hello_ack(1, 0)), 0).header->body_type() ==
        schema::Body::HelloAck);
  const auto query = encode_liveness_query(3, 0);
  const schema::Header* query_header = verify_header(header_of(*query), 0).header;
  REQUIRE(query_header != nullptr);
  REQUIRE(query_header->body_type() == schema::Body::LivenessQuery);
  CHECK(query_header->body_as_LivenessQuery()->rank() == 3);
  const auto report = encode_liveness_report(3, kNotHeardMs, 0);
  const schema::Header* report_header = verify_header(header_of(*report), 0).header;
  REQUIRE(report_header != nullptr);
  REQUIRE(report_header->body_type() == schema::Body::LivenessReport);
  CHECK(report_header->body_as_LivenessReport()->rank() == 3);
  CHECK(report_header->body_as_LivenessReport()->silent_ms() == kNotHeardMs);
  const auto notice = encode_connection_notice(2, "a frame did not verify", 0);
  const schema::Header* notice_header = verify_header(header_of(*notice), 0).header;
  REQUIRE(notice_header != nullptr);
  REQUIRE(notice_header->body_type() == schema::Body::ConnectionNotice);
  CHECK(notice_header->body_as_ConnectionNotice()->rank() == 2);
  CHECK(notice_header->body_as_ConnectionNotice()->reason()->str() == "a frame did not verify");

  HelloFields big = hello;  // a long peer list goes to the heap, not the inline buffer
  for (int i = 0; i < 100; ++i) big.peers.push_back("10.0.0." + std::to_string(i) + ":4000");
  const auto large = encode_hello(big, 0);
  CHECK(decode_hello(*verify_header(header_of(*large), 0).header->body_as_Hello()).peers ==
        big.peers);
}

TEST_CASE("check_hello names what differs with both values", "[net][handshake]") {
  HelloFields ours;
  ours.rank = 0;
  ours.job_name = "a";
  ours.config_hash = 0x1234;
  ours.peers = {"h:1", "h:2", "h:3"};
  HelloFields theirs = ours;
  theirs.rank = 2;
  CHECK(check_hello(ours, theirs).empty());

  auto differ = [&](auto edit) {
    HelloFields t = theirs;
    edit(t);
    return check_hello(ours, t);
  };
  CHECK(differ([](HelloFields& t) { t.config_hash = 0xabcd; }) ==
        "config hash differs: rank 0 has 0x0000000000001234, rank 2 has 0x000000000000abcd");
  // With both configs' texts, the keys that differ, each side named by its rank.
  ours.config_text = "data.batch = 32\noptimizer.lr = 0.1\nsync.strategy = \"ps\"\n";
  const std::string keys = differ([](HelloFields& t) {
    t.config_hash = 0xabcd;
    t.config_text = "data.batch = 32\noptimizer.lr = 0.05\nsync.strategy = \"auto\"\n";
  });
  CHECK_THAT(keys,
             Catch::StartsWith("config differs: optimizer.lr = 0.05 on rank 2, 0.1 on rank 0; "
                               "sync.strategy = \"auto\" on rank 2, \"ps\" on rank 0 ("));
  CHECK_THAT(keys, !Catch::Contains("data.batch"));
  // Texts that agree (a hash from another version): the hashes.
  CHECK_THAT(differ([&](HelloFields& t) {
               t.config_hash = 0xabcd;
               t.config_text = ours.config_text;
             }),
             Catch::StartsWith("config hash differs"));
  ours.config_text.clear();
  CHECK(differ([](HelloFields& t) { t.job_name = "b"; }) ==
        "job name differs: ours \"a\", theirs \"b\"");
  CHECK(differ([](HelloFields& t) { t.protocol_version = 99; }) ==
        "protocol version differs: ours " + std::to_string(kProtocolVersion) + ", theirs 99");
  CHECK(differ([](HelloFields& t) { t.peers[1] = "h:9"; }) ==
        "peer list differs at rank 1: ours h:2, theirs h:9");
  CHECK(differ([](HelloFields& t) { t.peers.pop_back(); }) ==
        "peer list differs: ours has 3 peers, theirs 2");
  CHECK_THAT(differ([](HelloFields& t) { t.rank = 3; }), Catch::Contains("out of range"));
  CHECK_THAT(differ([](HelloFields& t) { t.rank = 0; }), Catch::Contains("must not dial"));
  // A node that rejoins dials every rank (ours is 0: here it claims rank 2 either way), never ours.
  CHECK(differ([](HelloFields& t) { t.rejoin = true; }).empty());
  CHECK_THAT(differ([](HelloFields& t) {
               t.rank = 0;
               t.rejoin = true;
             }),
             Catch::Contains("this node's own rank"));
}

TEST_CASE("payload owns, copies, views and reinterprets", "[net][payload]") {
  CHECK(Payload().size() == 0);
  CHECK(Payload().bytes().empty());
  Payload owned = Payload::allocate(8);
  std::memset(owned.mutable_bytes().data(), 1, 8);
  const Payload shared = owned;  // shares the bytes
  CHECK(shared.bytes().data() == owned.bytes().data());
  CHECK(shared.as<std::uint32_t>().size() == 2);
  CHECK(shared.as<std::uint32_t>()[0] == 0x01010101u);
  CHECK_THROWS_AS(Payload::allocate(6).as<float>(), gradmesh::ContractError);

  const std::array<std::byte, 3> raw{std::byte{1}, std::byte{2}, std::byte{3}};
  const Payload copy = Payload::copy_of(raw);
  CHECK(copy.bytes().data() != raw.data());
  CHECK(std::equal(raw.begin(), raw.end(), copy.bytes().begin()));
  Payload view = Payload::view(raw);
  CHECK(view.bytes().data() == raw.data());
  CHECK_FALSE(view.owned());
  CHECK_THROWS_AS(view.mutable_bytes(), gradmesh::ContractError);

  auto keep = std::make_shared<std::vector<float>>(4, 2.0f);
  const Payload kept = Payload::view(std::as_bytes(std::span(*keep)), keep);
  const std::weak_ptr<std::vector<float>> weak = keep;
  keep.reset();
  CHECK_FALSE(weak.expired());  // the Payload keeps its owner alive
  CHECK(kept.as<float>()[3] == 2.0f);
}

TEST_CASE("endpoint formats and parses host:port", "[net][endpoint]") {
  CHECK(Endpoint{"127.0.0.1", 4000}.to_string() == "127.0.0.1:4000");
  CHECK(Endpoint{"::1", 4000}.to_string() == "[::1]:4000");
  CHECK(parse_endpoint("node7:123") == Endpoint{"node7", 123});
  CHECK(parse_endpoint("[::1]:80") == Endpoint{"::1", 80});
  CHECK_THROWS_AS(parse_endpoint("node7"), gradmesh::ConfigError);
  CHECK_THROWS_AS(parse_endpoint("node7:0"), gradmesh::ConfigError);
  CHECK_THROWS_AS(parse_endpoint("node7:70000"), gradmesh::ConfigError);
}

// libFuzzer target for the frame decoding a node runs on a peer's bytes (issue 13, item 5):
// net/frame.h's decode_prefix() and verify_header(), then the reads of a verified header that
// net/tcp/receive.cpp makes (decode_hello(), the Data tags, the Refuse and Abort reasons), and the
// handshake's: a Challenge through auth::decode_challenge() and both sides' checks
// (net/tcp/handshake.h), a Proof through auth::verify(), a Hello through check_hello() against a
// node's own fields.
//
// An input is one byte, the receiver's data lane count (the transport's lane count, <= 255),
// one byte of limits (bit 0: the handshake has not completed; bits 1-4: net.max_frame_bytes =
// 2^(6 + b) bytes), then a byte stream as a socket delivers it: frames of
//   u32 header_bytes | u32 payload_bytes | header | payload   (net/frame.h)
// cut anywhere. Each header is copied into a buffer of exactly its size, as the reader does
// (net/tcp/connection.cpp), so AddressSanitizer sees any read past it.
//
// Build and run: scripts/fuzz.sh [RUNS [SEED]]; seeds: frame_fuzz_seeds.cpp.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/frame.h"
#include "net/tcp/auth.h"
#include "net/tcp/handshake.h"

namespace {

using namespace gradmesh::net;

/// Stops the run with `what`: libFuzzer saves the input as a crash artifact.
[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "frame_fuzz: %s\n", what);
  std::abort();
}

/// The acceptor's side of a handshake in progress (rank 0 of a 3-node job with a secret): what a
/// received Proof or Challenge MAC is checked against.
struct Handshake {
  auth::Key key{"fuzz secret"};
  auth::Nonce own_nonce{};
  auth::Nonce their_nonce{};
  [[nodiscard]] auth::Transcript transcript() const {
    return auth::Transcript{auth::Side::kDialer, &their_nonce, &own_nonce, "fuzz", 1, 0};
  }
};

const Handshake& handshake() {
  static const Handshake h;
  return h;
}

/// Reads every field a receiver reads from a verified header; returns a value that depends on
/// them, so none of the reads is optimised away.
std::size_t read_fields(const schema::Header& header, std::size_t data_lane_count) {
  switch (header.body_type()) {
    case schema::Body::Hello: {
      const HelloFields hello = decode_hello(*header.body_as_Hello());
      std::size_t sum = hello.job_name.size() + hello.rank + hello.protocol_version;
      for (const std::string& peer : hello.peers) sum += peer.size();
      // The acceptor's check against its own fields (rank 0 of a 3-node job).
      HelloFields ours;
      ours.job_name = "fuzz";
      ours.rank = 0;
      ours.peers = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
      return sum + check_hello(ours, hello).size();
    }
    case schema::Body::HelloAck:
      return header.body_as_HelloAck()->rank();
    case schema::Body::Refuse: {
      const auto* reason = header.body_as_Refuse()->reason();
      return reason != nullptr ? reason->str().size() : 0;
    }
    case schema::Body::Abort: {
      const auto* reason = header.body_as_Abort()->reason();
      return (reason != nullptr ? reason->str().size() : 0) +
             static_cast<std::size_t>(header.body_as_Abort()->failed_rank() & 0xff);
    }
    case schema::Body::Data: {
      const schema::Data* data = header.body_as_Data();
      if (data->lane() >= data_lane_count) fail("verify_header passed a Data lane out of range");
      return data->lane() + data->kind() + data->key() + data->round() + data->message_bytes();
    }
    case schema::Body::DataMore:  // no fields: the reader checks it against the cut message
      return 3;
    case schema::Body::Challenge: {
      // What net/tcp/auth.cpp reads of a peer's Challenge, then both sides' checks of it, and
      // the acceptor's MAC check when it carries one.
      const schema::Challenge* challenge = header.body_as_Challenge();
      std::string error;
      const std::optional<auth::ChallengeFields> fields = auth::decode_challenge(*challenge, error);
      if (fields.has_value() == !error.empty()) fail("decode_challenge: neither fields nor error");
      if (!fields) return error.size();
      std::size_t sum = fields->rank + fields->mac.size();
      sum += check_challenge(*fields, 1, 3, true, true).size();
      sum += check_challenge(*fields, 0, 2, false, false).size();
      sum += check_acceptor_challenge(*fields, 2, 1, true, true).size();
      sum += auth::verify(handshake().key, handshake().transcript(), fields->mac) ? 1 : 0;
      return sum;
    }
    case schema::Body::Proof: {
      const auto* mac = header.body_as_Proof()->mac();
      if (mac == nullptr) return 0;
      const std::span<const std::uint8_t> bytes(mac->data(), mac->size());
      return mac->size() + (auth::verify(handshake().key, handshake().transcript(), bytes) ? 1 : 0);
    }
    case schema::Body::Goodbye:
      return 1;
    case schema::Body::Heartbeat:
      return 2;
    case schema::Body::LivenessQuery:  // the rank is checked against the peer count on receipt
      return header.body_as_LivenessQuery()->rank();
    case schema::Body::LivenessReport:
      return header.body_as_LivenessReport()->rank() + header.body_as_LivenessReport()->silent_ms();
    case schema::Body::ConnectionNotice: {  // the rank is checked against the peer count on receipt
      const auto* reason = header.body_as_ConnectionNotice()->reason();
      return header.body_as_ConnectionNotice()->rank() +
             (reason != nullptr ? reason->str().size() : 0);
    }
    default:
      fail("verify_header passed an unknown body type");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  if (size < 2) return 0;
  const std::size_t data_lane_count = std::to_integer<std::size_t>(in[0]);
  const auto limits = std::to_integer<unsigned>(in[1]);
  const bool handshake = (limits & 1u) != 0;
  const std::uint64_t max_frame_bytes = std::uint64_t{1} << (6 + ((limits >> 1) & 15u));
  constexpr std::size_t kMaxHandshakeHeader = 1024;  // the transport's is 1 MiB
  in = in.subspan(2);
  volatile std::size_t sink = 0;
  while (in.size() >= kPrefixBytes) {
    const auto prefix_bytes = in.first<kPrefixBytes>();
    const FramePrefix prefix = decode_prefix(prefix_bytes);
    std::array<std::byte, kPrefixBytes> again{};
    encode_prefix(prefix, again);
    if (!std::equal(again.begin(), again.end(), prefix_bytes.begin()))
      fail("encode_prefix(decode_prefix(bytes)) != bytes");
    in = in.subspan(kPrefixBytes);
    // The reader's check before it allocates for the frame: a refused prefix closes the
    // connection, so the rest of the stream is never read.
    const std::string why = check_prefix(prefix, max_frame_bytes, handshake, kMaxHandshakeHeader);
    const bool too_big =
        prefix.frame_bytes() > max_frame_bytes ||
        (handshake && (prefix.header_bytes > kMaxHandshakeHeader || prefix.payload_bytes != 0));
    if (why.empty() == too_big) fail("check_prefix disagrees with the limits");
    if (!why.empty()) break;

    const std::size_t header_bytes = std::min<std::size_t>(prefix.header_bytes, in.size());
    const std::vector<std::byte> header(in.begin(),
                                        in.begin() + static_cast<std::ptrdiff_t>(header_bytes));
    in = in.subspan(header_bytes);
    const HeaderCheck check = verify_header(header, data_lane_count);
    if ((check.header == nullptr) == check.error.empty())
      fail("verify_header returned neither a header nor an error, or both");
    if (check.header != nullptr) sink = sink + read_fields(*check.header, data_lane_count);

    in = in.subspan(std::min<std::size_t>(prefix.payload_bytes, in.size()));
  }
  return 0;
}

// libFuzzer target for the frame decoding a node runs on a peer's bytes (issue 13, item 5):
// net/frame.h's decode_prefix() and verify_header(), then the reads of a verified header that
// net/tcp/receive.cpp makes (decode_hello(), the Data tags, the Refuse and Abort reasons).
//
// An input is one byte, the receiver's data stage count (the transport's stage count, <= 255),
// then a byte stream as a socket delivers it: frames of
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
#include <span>
#include <string>
#include <vector>

#include "net/frame.h"

namespace {

using namespace gradmesh::net;

/// Stops the run with `what`: libFuzzer saves the input as a crash artifact.
[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "frame_fuzz: %s\n", what);
  std::abort();
}

/// Reads every field a receiver reads from a verified header; returns a value that depends on
/// them, so none of the reads is optimised away.
std::size_t read_fields(const schema::Header& header, std::size_t data_stage_count) {
  switch (header.body_type()) {
    case schema::Body::Hello: {
      const HelloFields hello = decode_hello(*header.body_as_Hello());
      std::size_t sum = hello.job_name.size() + hello.rank + hello.protocol_version;
      for (const std::string& peer : hello.peers) sum += peer.size();
      return sum;
    }
    case schema::Body::HelloAck:
      return header.body_as_HelloAck()->rank();
    case schema::Body::Refuse: {
      const auto* reason = header.body_as_Refuse()->reason();
      return reason != nullptr ? reason->str().size() : 0;
    }
    case schema::Body::Abort: {
      const auto* reason = header.body_as_Abort()->reason();
      return reason != nullptr ? reason->str().size() : 0;
    }
    case schema::Body::Data: {
      const schema::Data* data = header.body_as_Data();
      if (data->stage() >= data_stage_count) fail("verify_header passed a Data stage out of range");
      return data->stage() + data->kind() + data->key() + data->round();
    }
    case schema::Body::Challenge: {
      // What net/tcp/auth.cpp reads of a peer's Challenge (absent vectors are empty there).
      const schema::Challenge* challenge = header.body_as_Challenge();
      std::size_t sum = challenge->protocol_version() + challenge->rank() + challenge->secret();
      if (challenge->nonce() != nullptr) sum += challenge->nonce()->size();
      if (challenge->mac() != nullptr) sum += challenge->mac()->size();
      return sum;
    }
    case schema::Body::Proof: {
      const auto* mac = header.body_as_Proof()->mac();
      return mac != nullptr ? mac->size() : 0;
    }
    case schema::Body::Goodbye:
      return 1;
    default:
      fail("verify_header passed an unknown body type");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  const std::size_t data_stage_count = std::to_integer<std::size_t>(in[0]);
  in = in.subspan(1);
  volatile std::size_t sink = 0;
  while (in.size() >= kPrefixBytes) {
    const auto prefix_bytes = in.first<kPrefixBytes>();
    const FramePrefix prefix = decode_prefix(prefix_bytes);
    std::array<std::byte, kPrefixBytes> again{};
    encode_prefix(prefix, again);
    if (!std::equal(again.begin(), again.end(), prefix_bytes.begin()))
      fail("encode_prefix(decode_prefix(bytes)) != bytes");
    in = in.subspan(kPrefixBytes);

    const std::size_t header_bytes = std::min<std::size_t>(prefix.header_bytes, in.size());
    const std::vector<std::byte> header(in.begin(),
                                        in.begin() + static_cast<std::ptrdiff_t>(header_bytes));
    in = in.subspan(header_bytes);
    const HeaderCheck check = verify_header(header, data_stage_count);
    if ((check.header == nullptr) == check.error.empty())
      fail("verify_header returned neither a header nor an error, or both");
    if (check.header != nullptr) sink = sink + read_fields(*check.header, data_stage_count);

    in = in.subspan(std::min<std::size_t>(prefix.payload_bytes, in.size()));
  }
  return 0;
}

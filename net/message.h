#pragma once
// One tagged payload between two ranks.

#include <cstdint>

#include "net/payload.h"

namespace gradmesh::net {

/// What Transport::send() takes and MessageHandler receives. The tags travel in the FlatBuffers
/// header (schema::Data); the payload follows as raw bytes, never copied. Plain value type.
struct Message {
  std::uint8_t stage = 0;   ///< index into TransportOptions::stages, for per-stage byte counters
  std::uint16_t kind = 0;   ///< meaning owned by the caller
  std::uint64_t key = 0;    ///< caller's key (e.g. a KV chunk id)
  std::uint64_t round = 0;  ///< caller's round / iteration
  Payload payload;          ///< the bytes; shared, not copied
};

}  // namespace gradmesh::net

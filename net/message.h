#pragma once
// One tagged payload between two ranks.

#include <cstdint>

#include "net/payload.h"

namespace gradmesh::net {

/// What Transport::send() takes and MessageHandler receives. The tags travel in the FlatBuffers
/// header (schema::Data); the payload follows as raw bytes, never copied. Plain value type.
struct Message {
  std::uint8_t lane = 0;    ///< index into TransportOptions::lanes: per-lane byte counters and
                            ///< the lane's share of the link (Transport::set_lane_weights)
  std::uint16_t kind = 0;   ///< meaning owned by the caller
  std::uint64_t key = 0;    ///< caller's key (e.g. a KV chunk id)
  std::uint64_t round = 0;  ///< caller's round / iteration
  Payload payload;          ///< the bytes; shared, not copied
  /// Local send scheduling only: among the messages queued for one peer, a lower value is written
  /// first (a sync stage sets the layer index: the next forward pass needs layer 0 first). Not on
  /// the wire: a received message has priority 0. See Transport for the ordering contract.
  std::uint32_t priority = 0;
};

}  // namespace gradmesh::net

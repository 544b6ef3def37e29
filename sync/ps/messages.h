#pragma once
// The parameter server's lanes and message kinds (Poseidon ATC'17 sec. 4.1: KV store, syncer).

#include <cstdint>
#include <string_view>

#include "topo/lanes.h"

namespace gradmesh::sync::ps {

/// worker -> KV shard: gradient chunks.
inline constexpr std::string_view kPushLane = topo::kLaneKvPush;
/// KV shard -> all: updated parameter chunks.
inline constexpr std::string_view kBroadcastLane = topo::kLaneKvBroadcast;
/// The same two for compressed PS (sync.compression.method fp16, bf16, int8: PsScheme with a
/// wire codec), so that a plan can hold both PS forms: encoded gradient chunks, and the owner's
/// parameter change encoded.
inline constexpr std::string_view kCodedPushLane = "kv_push_coded";
inline constexpr std::string_view kCodedBroadcastLane = "kv_broadcast_coded";

/// Message::kind values of the PS lanes.
enum class Kind : std::uint16_t {
  kGradientChunk =
      1,  ///< key = KV chunk id, round = iteration, payload = the chunk's gradient (floats)
  kParameterChunk =
      2,  ///< key = KV chunk id, round = iteration, payload = the chunk's new parameters
  kCodedGradientChunk = 3,  ///< as kGradientChunk, payload = the wire codec's encoding of it
  kParameterDelta = 4,      ///< key, round as kParameterChunk; payload = the wire codec's
                            ///< encoding of the master copy less the replicas' copy: add it
};

}  // namespace gradmesh::sync::ps

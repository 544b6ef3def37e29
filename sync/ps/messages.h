#pragma once
// The parameter server's lanes and message kinds (Poseidon ATC'17 sec. 4.1: KV store, syncer).

#include <cstdint>
#include <string_view>

namespace gradmesh::sync::ps {

/// worker -> KV shard: gradient chunks.
inline constexpr std::string_view kPushLane = "kv_push";
/// KV shard -> all: updated parameter chunks.
inline constexpr std::string_view kBroadcastLane = "kv_broadcast";

/// Message::kind values of the PS lanes.
enum class Kind : std::uint16_t {
  kGradientChunk =
      1,  ///< key = KV chunk id, round = iteration, payload = the chunk's gradient (floats)
  kParameterChunk =
      2,  ///< key = KV chunk id, round = iteration, payload = the chunk's new parameters
};

}  // namespace gradmesh::sync::ps

#pragma once
// The transport lanes the built-in schemes send on, named once: the sync stage routes its messages
// on them (sync/ps, sync/poseidon, sync/allreduce messages.h) and the planner counts its predicted
// bytes by them (Plan::lane_bytes), as the transport's byte counters name them.

#include <string_view>

namespace gradmesh::topo {

inline constexpr std::string_view kLaneKvPush = "kv_push";            ///< worker -> KV shard
inline constexpr std::string_view kLaneKvBroadcast = "kv_broadcast";  ///< KV shard -> all
inline constexpr std::string_view kLaneSfBroadcast = "sf_broadcast";  ///< SFB: worker -> all
inline constexpr std::string_view kLaneAllReduce = "allreduce";       ///< ring: r -> r + 1

}  // namespace gradmesh::topo

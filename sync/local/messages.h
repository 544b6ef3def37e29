#pragma once
// The lane of strategy local (sync/local/local_stage.h).

#include <string_view>

namespace gradmesh::sync::local {

/// The outer exchange: a ring all-reduce of the pseudo-gradients (collective::RingAllReduce:
/// Message::kind its RingKind, key = step, round = the outer round).
inline constexpr std::string_view kLane = "local_outer";

}  // namespace gradmesh::sync::local

#pragma once
// Sufficient-factor broadcasting's lane and message kind (Poseidon ATC'17 sec. 2.1, 3.2).

#include <cstdint>
#include <string_view>

#include "topo/lanes.h"

namespace gradmesh::sync::sfb {

/// worker -> all: sufficient factors (u, v) of dense layers.
inline constexpr std::string_view kLane = topo::kLaneSfBroadcast;
/// worker -> all: the same factors in 16 bits (fp16 or bf16: sync.compression.method; issue 28).
inline constexpr std::string_view kHalfLane = "sf_broadcast_half";

/// Message::kind values of the SFB stage.
enum class Kind : std::uint16_t {
  kSufficientFactors = 3,  ///< key = layer, round = iteration, payload = U (K x M) then V (K x N)
};

}  // namespace gradmesh::sync::sfb

#pragma once
// The transport's byte-counter stages and the message kinds of every strategy. One list for the
// whole sync layer, so a Transport can be made before the strategy and metrics name stages alike.

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::sync {

/// Stage ids: indices into stage_names(); Message::stage.
enum class Stage : std::uint8_t {
  kKvPush = 0,       ///< worker -> KV shard: gradient chunks (PS)
  kKvBroadcast = 1,  ///< KV shard -> all: updated parameter chunks (PS)
  kSfBroadcast = 2,  ///< worker -> all: sufficient factors (u, v) of dense layers (SFB)
  kAkoPartition = 3, ///< worker -> peer: one partition of the accumulated gradient (Ako)
  kAkoControl = 4,   ///< worker -> all: Ako's agreement on p (eq. 3 inputs)
  kAkoFullRound = 5, ///< worker -> peer: Ako's whole-model rounds (p = 1 warm-up, switch, end)
};

/// Names of the stages, indexed by Stage: what metrics call "bytes_sent_by_stage".
[[nodiscard]] inline std::vector<std::string> stage_names() {
  return {"kv_push", "kv_broadcast", "sf_broadcast", "ako_partition", "ako_control",
          "ako_full_round"};
}

/// Message::kind values.
enum class MessageKind : std::uint16_t {
  kGradientChunk = 1,  ///< key = KV chunk id, round = iteration, payload = chunk's gradient (floats)
  kParameterChunk = 2, ///< key = KV chunk id, round = iteration, payload = chunk's new parameters
  kSufficientFactors = 3,  ///< key = layer, round = iteration, payload = U (K x M) then V (K x N)
  kAkoPartition = 4,       ///< key = p << 32 | range k, round = sender's round t, payload = range k of g*_t
  kAkoProfile = 5,         ///< key = plan (0, 1), round = 0, payload = the sender's eq. 3 inputs (doubles)
  kAkoDone = 6,            ///< no payload: the sender has sent its last Ako round
  kAkoFullRound = 7,       ///< key = 0, round = sender's round t, payload = all m floats the
                           ///< receiver lacks of the sender's gradients up to t
};

}  // namespace gradmesh::sync

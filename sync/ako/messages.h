#pragma once
// Ako's lanes and message kinds (SoCC'16 sec. 3.1, 3.2, 4.2).

#include <cstdint>
#include <string_view>

namespace gradmesh::sync::ako {

/// worker -> peer: one partition of the accumulated gradient.
inline constexpr std::string_view kPartitionLane = "ako_partition";
/// worker -> all: the agreement on p (eq. 3 inputs) and the end-of-job marker.
inline constexpr std::string_view kControlLane = "ako_control";
/// worker -> peer: whole-model rounds (p = 1 warm-up, a switch of p, the end of the job).
inline constexpr std::string_view kFullRoundLane = "ako_full_round";
/// ring neighbours: the end-of-job mean of the replicas (sync.ako.final = average), a
/// RingAllReduce of the parameters (sync/collective/ring_allreduce.h).
inline constexpr std::string_view kAverageLane = "ako_average";

/// Message::kind values of Ako's lanes.
enum class Kind : std::uint16_t {
  kPartition = 4,  ///< key = p << 32 | range k, round = sender's round t, payload = range k of g*_t
  kProfile = 5,    ///< key = plan (0, 1), round = 0, payload = the sender's eq. 3 inputs (doubles)
  kDone = 6,       ///< no payload: the sender has sent its last Ako round
  kFullRound = 7,  ///< key = 0, round = sender's round t, payload = all m floats the receiver
                   ///< lacks of the sender's gradients up to t
  kReplica = 8,    ///< key = 0, round = 0, payload = the sender's whole replica (m floats): the
                   ///< end-of-job mean among survivors after a peer failed (sync.ako.final =
                   ///< average)
  kJoinRequest = 9,  ///< key = 1 to the donor (send your replica), else 0; no payload: the
                     ///< sender restarted, its lanes are routed, rounds to it may go again
  kJoinState = 10,   ///< key = final p << 32 | p1 (auto; p << 32 | p for an explicit p), round =
                     ///< the sender's clock c_j (its iterations done), payload = its replica
                     ///< (m floats) at an iteration boundary, what a rejoining node starts from,
                     ///< then one double: the job's slowest link B as it knows it (bytes/s;
                     ///< 0: unknown)
};

/// The shift of p in the keys of kPartition (p << 32 | k) and kJoinState (p << 32 | p1).
inline constexpr unsigned kPartitionShift = 32;

}  // namespace gradmesh::sync::ako

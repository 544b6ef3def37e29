#pragma once
// Internal to sync/ako/: what the files implementing AkoStage share. AkoStage is implemented one
// concept a file: ako_stage.cpp (construction and the compute tasks), ako_profile.cpp (gamma
// profiles and the agreement on p, eq. 3), ako_receiver.cpp (received partitions, staging,
// failures), ako_rejoin.cpp (a restarted node rejoining), ako_finish.cpp (the end-of-job exchange,
// pauses and the summary). The network side is a class of its own, ako::RoundSender
// (round_sender.h), as are the receiver, the agreement on p, the membership, the join and final
// exchanges.

#include <algorithm>
#include <cstddef>
#include <string>

#include <spdlog/spdlog.h>

#include "sync/ako/ako_stage.h"

namespace gradmesh::sync::ako_internal {

inline constexpr std::size_t kProfileDoubles = 3;  // gamma (1/s), model bytes, B (bytes/s)
using ako::kPartitionShift;  // ako::Kind::kPartition key: p << 32 | k (sync/ako/messages.h)

}  // namespace gradmesh::sync::ako_internal

#pragma once
// Ako's number of partitions (Ako SoCC'16 sec. 3.2, eq. 3): the pure function lives in the
// planner (topo/partition_count.h); this header gives it to the Ako stage with the option that
// picks B.

#include <cstddef>
#include <optional>

#include "sync/ako/options.h"
#include "topo/partition_count.h"

namespace gradmesh::sync::ako {

using topo::kMaxAutoPartitions;
using topo::kMaxRingBytes;
using topo::max_auto_partitions;
using topo::PartitionChoice;
using topo::partitions_for;

/// B for eq. 3, bytes/s: AkoOptions::max_send_rate (net.max_send_rate) when set, else
/// AkoOptions::bandwidth (sync.ako.bandwidth), else `measured` (planner.bandwidth, or the slowest
/// link the start-up probe measured). Throws gradmesh::ConfigError naming sync.ako.partitions,
/// sync.ako.bandwidth, net.max_send_rate and planner.probe when none is known.
[[nodiscard]] double eq3_bandwidth(const AkoOptions& options,
                                   std::optional<double> measured = std::nullopt);

}  // namespace gradmesh::sync::ako

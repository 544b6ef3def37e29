#pragma once
// Ring all-reduce's lane (MG-WFBP sec. II-D, Table II; what Horovod and DDP run). Its message
// kinds are the ring's own: collective::RingKind (sync/collective/ring_allreduce.h).

#include <string_view>

#include "topo/lanes.h"

namespace gradmesh::sync::allreduce {

/// rank r -> rank r + 1: segments of a bucket, reduce-scatter then all-gather.
inline constexpr std::string_view kLane = topo::kLaneAllReduce;
/// The same rings with every segment in 16 bits (fp16 or bf16: sync.compression.method; issue 28).
inline constexpr std::string_view kHalfLane = "allreduce_half";

}  // namespace gradmesh::sync::allreduce

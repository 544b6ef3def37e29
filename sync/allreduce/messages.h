#pragma once
// Ring all-reduce's stage and message kinds (MG-WFBP sec. II-D, Table II; what Horovod and DDP run).

#include <cstdint>
#include <string_view>

namespace gradmesh::sync::allreduce {

/// rank r -> rank r + 1: segments of a bucket, reduce-scatter then all-gather.
inline constexpr std::string_view kStage = "allreduce";

/// Message::kind values of the all-reduce stage. key = bucket << 32 | step, round = iteration,
/// payload = one segment of the bucket (floats).
enum class Kind : std::uint16_t {
  kReduceScatter = 1,  ///< a partial sum, to be added in (steps 0 .. n - 2)
  kAllGather = 2,      ///< a fully reduced segment, to be stored and passed on (steps 0 .. n - 2)
};

}  // namespace gradmesh::sync::allreduce

#pragma once
// Ako's cost model for the number of gradient partitions (Ako SoCC'16 sec. 3.2, eq. 3).

#include <cstddef>

#include "sync/sync_stage.h"

namespace gradmesh::sync::ako {

/// Largest partition count `auto` picks: the ring of the accumulation queue holds p copies of the
/// gradient (p x m x 4 bytes), so p is also capped by memory (kMaxRingBytes); and p <= m (a
/// partition holds at least one float). An explicit sync.ako.partitions may go up to m.
inline constexpr std::size_t kMaxAutoPartitions = 128;
/// Most bytes auto p lets the accumulation queue's ring take: p <= kMaxRingBytes / (4 m).
inline constexpr std::size_t kMaxRingBytes = std::size_t{1} << 30;

/// The largest p auto may pick for a model of `model_floats` floats: min(kMaxAutoPartitions, m,
/// kMaxRingBytes / (4 m)), at least 1. (The demo MLP: 128; 784-4096-4096-10, 20 M floats: 13.)
[[nodiscard]] std::size_t max_auto_partitions(std::size_t model_floats) noexcept;

/// The inputs and result of eq. 3, as logged at start and returned by AkoStage::summary().
struct PartitionChoice {
  std::size_t partitions = 1;      ///< p
  double gamma = 0;                ///< gradients per second (AkoStage: mean over nodes)
  double model_bytes = 0;          ///< m, bytes of one full gradient (floats x 4)
  double bandwidth = 0;            ///< B, bytes/s (0: unknown, explicit p)
  std::size_t nodes = 1;           ///< n
  double eq3 = 0;                  ///< gamma m (n - 1) / B before rounding and clamping
  /// Bytes/s one node sends at this p: gamma m (n - 1) / p (payload only).
  [[nodiscard]] double predicted_send_rate() const noexcept;
};

/// Eq. 3: p = ceil(gamma m (n - 1) / B), clamped to [1, max_auto_partitions(model_floats)]; when
/// the clamp binds from above, predicted_send_rate() exceeds B (the caller warns).
/// gamma: gradients/s (>= 0, finite); model_floats: m in floats (>= 1); nodes: n (>= 1);
/// bandwidth: B in bytes/s (> 0). Throws gradmesh::ContractError on a bad input.
[[nodiscard]] PartitionChoice partitions_for(double gamma, std::size_t model_floats,
                                             std::size_t nodes, double bandwidth);

/// B for eq. 3: AkoOptions::max_send_rate (net.max_send_rate) when set, else
/// AkoOptions::bandwidth (sync.ako.bandwidth). Throws gradmesh::ConfigError naming
/// sync.ako.partitions, sync.ako.bandwidth and net.max_send_rate when neither is set.
[[nodiscard]] double eq3_bandwidth(const AkoOptions& options);

}  // namespace gradmesh::sync::ako

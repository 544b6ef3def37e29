#pragma once
// Ako's partition count p (Ako SoCC'16 sec. 3.2, eq. 3) as a pure function of the planner's
// inputs. Same semantics as sync/ako/partition_count.h (PartitionChoice, partitions_for, the
// clamps), so that the Ako stage can forward to this one.

#include <cstddef>

namespace gradmesh::topo {

/// Largest partition count eq. 3 picks: the accumulation queue's ring holds p copies of the
/// gradient (p x m x 4 bytes), so p is also capped by memory (kMaxRingBytes); and p <= m (a
/// partition holds at least one float).
inline constexpr std::size_t kMaxAutoPartitions = 128;
/// Most bytes p copies of the gradient may take: p <= kMaxRingBytes / (4 m).
inline constexpr std::size_t kMaxRingBytes = std::size_t{1} << 30;

/// The largest p eq. 3 may pick for a model of `model_floats` floats: min(kMaxAutoPartitions, m,
/// kMaxRingBytes / (4 m)), at least 1. Thread-safe.
[[nodiscard]] std::size_t max_auto_partitions(std::size_t model_floats) noexcept;

/// The inputs and result of eq. 3.
struct PartitionChoice {
  std::size_t partitions = 1;  ///< p
  double gamma = 0;            ///< gradients per second one node computes
  double model_bytes = 0;      ///< m, bytes of one full gradient (floats x 4)
  double bandwidth = 0;        ///< B, bytes/s one node sends (0: unknown)
  std::size_t nodes = 1;       ///< n
  double eq3 = 0;              ///< gamma m (n - 1) / B before rounding and clamping
  /// Bytes/s one node sends at this p: gamma m (n - 1) / p (payload only).
  [[nodiscard]] double predicted_send_rate() const noexcept;
};

/// Eq. 3: p = ceil(gamma m (n - 1) / B), clamped to [1, max_auto_partitions(model_floats)]; when
/// the clamp binds from above, predicted_send_rate() exceeds B. gamma: gradients/s (finite,
/// >= 0); model_floats: m in floats (>= 1); nodes: n (>= 1); bandwidth: B in bytes/s (finite,
/// > 0). Thread-safe. Throws gradmesh::ContractError, printing the bad value, on a bad input.
[[nodiscard]] PartitionChoice partitions_for(double gamma, std::size_t model_floats,
                                             std::size_t nodes, double bandwidth);

}  // namespace gradmesh::topo

#pragma once
// Ako's partition count p (Ako SoCC'16 sec. 3.2, eq. 3) as a pure function of the planner's
// inputs. Same semantics as sync/ako/partition_count.h (PartitionChoice, partitions_for, the
// clamps), so that the Ako stage can forward to this one.

#include <cstddef>
#include <span>
#include <vector>

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

/// Links whose measured rates lie within this factor of each other (fastest / slowest) count as
/// equal: link_partitions() then gives every link the same p, so that the start-up probe's spread
/// on links of one speed does not size their partitions differently.
inline constexpr double kEqualLinksRatio = 1.5;

/// Per-link partition counts for links of different speeds (issue 14, beyond eq. 3's single B).
/// Eq. 3 sizes one partition so that n - 1 of them per round fill B at the gradient rate gamma:
/// each link carries B / (n - 1). With measured rates r_i per link, each link's share of B follows
/// its rate instead, B r_i / sum(r), so every link carries what it can in the same round time
/// (1 / gamma): link i gets p_i = ceil(p_exact x mean(r) / r_i) partitions, where p_exact is eq.
/// 3's unrounded value (PartitionChoice::eq3; or an explicit p), and bytes per round m / p_i in
/// proportion to r_i. With equal links (every rate within kEqualLinksRatio of the others) every
/// link gets `partitions` (eq. 3's rounded, clamped p: the formula reduces to eq. 3).
///
/// `rates`: bytes/s per rank; entries <= 0 are not links (this node, a dead peer) and get 0.
/// Each p_i is clamped to [1, max_partitions]. Returns one count per entry of `rates`.
/// Thread-safe. Throws gradmesh::ContractError for a non-finite rate or p_exact, a
/// `partitions` or `max_partitions` of 0.
[[nodiscard]] std::vector<std::size_t> link_partitions(double p_exact, std::size_t partitions,
                                                       std::span<const double> rates,
                                                       std::size_t max_partitions);

}  // namespace gradmesh::topo

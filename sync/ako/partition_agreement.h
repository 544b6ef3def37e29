#pragma once
// The nodes' agreement on Ako's partition count p (Ako SoCC'16 sec. 3.2, eq. 3), for AkoStage.

#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sync/ako/partition_count.h"

namespace gradmesh::sync::ako {

/// The agreement on p, in plans: plan 0 is the warm-up's p1 (automatic p) or the configured p;
/// plan 1 the final automatic p. With automatic p each node profiles its gradient rate gamma once
/// per plan and sends it to every peer (kProfile); once every live node's gamma of a plan is in,
/// and the plan before it is agreed, each node computes the same p from their mean by eq. 3,
/// p = ceil(gamma m (n - 1) / B), m the model's bytes and B the bandwidth every node holds (a
/// profile for another m or B is refused). Each live link then gets its own count: p, or, with
/// automatic p and measured link rates, topo::link_partitions() of them.
///
/// Thread safety: any thread. record(), try_agree(), adopt(), set_local_gamma() and choice() take
/// an internal mutex. agree() is called once per plan (after try_agree() returned its choice, or
/// for a configured or adopted p); it publishes the plan's counts before agreed() passes the plan
/// (release), so partitions() and link_partitions() of a plan below agreed() (acquire) read
/// without a lock.
class PartitionAgreement {
 public:
  static constexpr std::size_t kPlans = 2;
  /// Whether rank `r` is live (peers that failed are left out of the mean and of the links).
  using Live = std::function<bool(std::size_t r)>;

  /// `rank` of `nodes`; `floats`: m in floats (>= 1); `automatic`: p by eq. 3 (else the configured
  /// p, set by agree(0, p, p)); `bandwidth`: B in bytes/s (0: unknown); `link_rates`: per rank,
  /// the measured B of the link to it in bytes/s (this node's entry ignored), empty when not
  /// measured.
  PartitionAgreement(std::size_t rank, std::size_t nodes, std::size_t floats, bool automatic,
                     double bandwidth, std::vector<double> link_rates);

  [[nodiscard]] bool automatic() const noexcept { return automatic_; }
  /// Plans a job agrees on: 2 with automatic p, else 1.
  [[nodiscard]] std::size_t plans_needed() const noexcept { return automatic_ ? kPlans : 1; }
  /// Per rank, the measured link rates (bytes/s) given at construction; empty: not measured.
  [[nodiscard]] const std::vector<double>& link_rates() const noexcept { return link_rates_; }

  /// Records node `from`'s profile for `plan` (< kPlans): gamma in gradients/s, and the m (bytes)
  /// and B (bytes/s) it was computed for. Returns "" when recorded, else why it was refused (a
  /// second profile of `from` for the plan; another m or B than this node's; gamma not finite or
  /// negative): the caller rejects the message, and nothing changes.
  [[nodiscard]] std::string record(std::size_t from, std::size_t plan, double gamma,
                                   double model_bytes, double bandwidth);

  /// With automatic p and more than one node: when `plan` is not agreed yet, the plan before it
  /// is, and every live node's gamma for it is in, agrees on p by eq. 3 from the mean of those
  /// gammas and returns the choice (once per plan; the caller then calls agree()). Else nullopt.
  [[nodiscard]] std::optional<PartitionChoice> try_agree(std::size_t plan, const Live& live);

  /// Sets `plan`'s p to `partitions` and each link's count from `p_exact` (eq. 3 before rounding,
  /// or the configured p) and, with automatic p, the measured rates of the live links; then
  /// raises agreed() to plan + 1. Returns the per-rank counts (0: this node, or a peer not live).
  const std::vector<std::size_t>& agree(std::size_t plan, std::size_t partitions, double p_exact,
                                        const Live& live);

  /// A node that rejoins a running job takes its donor's plans (p1, p) and profiles nothing:
  /// both plans count as agreed by try_agree(); the caller then agree()s them.
  void adopt(std::size_t p1, std::size_t p);

  /// With a configured p: this node's own gamma, for the summary's figures (eq. 3 unrounded).
  void set_local_gamma(double gamma);

  /// Plans agreed so far (acquire).
  [[nodiscard]] std::size_t agreed() const noexcept {
    return agreed_.load(std::memory_order_acquire);
  }
  /// The p of `plan`, agreed (plan < agreed()).
  [[nodiscard]] std::size_t partitions(std::size_t plan) const noexcept { return plans_[plan]; }
  /// The count of the link to `rank` in `plan`, agreed (plan < agreed()); 0 for this node.
  [[nodiscard]] std::size_t link_partitions(std::size_t plan, std::size_t rank) const noexcept {
    return link_plans_[plan][rank];
  }
  /// The figures of `plan`'s choice (gamma, m, B, n, eq. 3), as far as known.
  [[nodiscard]] PartitionChoice choice(std::size_t plan) const;

 private:
  const std::size_t rank_;
  const std::size_t nodes_;
  const std::size_t floats_;
  const bool automatic_;
  const double bandwidth_;
  const std::vector<double> link_rates_;

  mutable std::mutex mutex_;
  std::array<std::vector<std::optional<double>>, kPlans> gammas_;  // per plan, per rank
  std::array<bool, kPlans> decided_{};  // try_agree() or adopt() decided the plan
  std::array<PartitionChoice, kPlans> choices_{};

  // Written by agree() before agreed_ passes the plan; read after.
  std::array<std::size_t, kPlans> plans_{};
  std::array<std::vector<std::size_t>, kPlans> link_plans_;
  std::atomic<std::size_t> agreed_{0};
};

}  // namespace gradmesh::sync::ako

#pragma once
// Ako's staleness clocks: the bound that keeps a node's replica from running too far ahead of the
// slowest peer's (Ako SoCC'16 sec. 3.3; Algorithm 1 lines 3, 11 and 14).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/task.h"
#include "sync/collective/latch.h"

namespace gradmesh::sync::ako {

/// One clock s_i per peer i: the number of gradients of peer i contained in the partitions this
/// node has received from it (the `round` tag of the latest one; with one gradient per round, as in
/// the paper, that is one tick per partition received, line 14). The local clock c_j (gradients
/// this node produced, line 11) is passed in by the caller.
///
/// The bound (line 3): this node may compute gradient c_j + 1 only while
///     c_j <= min over peers i != self of s_i + slack,    slack = p + tau.
/// The slack is unknown until the nodes agree on p (eq. 3); until set_slack(), await() waits.
/// A node without peers is never bounded.
///
/// Blocking holds no thread: await() takes the deferred Completion of the iteration's gate task
/// and completes it at once when the bound holds, else later, from the thread whose advance() or
/// set_slack() makes it hold (the transport's loop thread). At most one await() is pending.
///
/// Errors: fail_all() (a PeerError from the transport's FailureHandler) fails the pending and every
/// later await(); the run rethrows it. First error wins.
/// Thread safety: every member may be called from any thread.
class StalenessClocks {
 public:
  /// `nodes` >= 1 clocks, of which `self` (< nodes) is not a peer; all start at 0.
  StalenessClocks(std::size_t nodes, std::size_t self);

  /// Sets slack = p + tau and completes the pending await() if the bound now holds.
  void set_slack(std::uint64_t slack);
  /// Raises peer `peer`'s clock to `clock` (never lowers it) and completes the pending await() if
  /// the bound now holds. gradmesh::ContractError for self or a rank >= nodes.
  void advance(std::size_t peer, std::uint64_t clock);
  /// Completes `gate` when local_clock <= min peer clock + slack (at once if it already holds).
  /// Fails it with the stored error after fail_all(). ContractError if one is already pending.
  void await(std::uint64_t local_clock, engine::Completion gate);
  /// Fails the pending and every later await() with `error`. First error wins.
  void fail_all(std::exception_ptr error);
  /// Drops peer `peer` from the bound for good (it failed: Ako SoCC'16 sec. 4.3, the survivors
  /// go on without it) and completes the pending await() if the bound now holds. With every peer
  /// dropped the bound always holds. Idempotent. ContractError for self or a rank >= nodes.
  void drop(std::size_t peer);

  /// Takes a dropped peer back (it restarted and rejoined, Ako SoCC'16 sec. 4.3): its clock is
  /// set to `clock`, from where advance() raises it as its partitions arrive. AkoStage passes the
  /// round of its first partition since it rejoined (before that it holds no one back). No-op if
  /// the peer is not dropped. ContractError for self or a rank >= nodes.
  void readmit(std::size_t peer, std::uint64_t clock);

  /// Peer `peer`'s clock.
  [[nodiscard]] std::uint64_t clock(std::size_t peer) const;
  /// min over the peers not dropped of their clock; nullopt without such peers.
  [[nodiscard]] std::optional<std::uint64_t> slowest() const;
  /// Whether an await() is pending (blocked).
  [[nodiscard]] bool blocked() const;
  /// How many await() calls had to wait.
  [[nodiscard]] std::uint64_t waits() const;

 private:
  [[nodiscard]] bool holds_locked(std::uint64_t local_clock) const;
  /// Releases the pending await() if its bound now holds.
  [[nodiscard]] collective::Settlement take_ready_locked();

  mutable std::mutex mutex_;
  std::vector<std::uint64_t> clocks_;
  std::vector<char> dropped_;  // per rank: 1 once drop()ped
  std::size_t self_;
  std::optional<std::uint64_t> slack_;
  collective::CompletionLatch gate_;  // the pending await(); the error of fail_all()
  std::uint64_t pending_clock_ = 0;
  std::uint64_t waits_ = 0;
};

}  // namespace gradmesh::sync::ako

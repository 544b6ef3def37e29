#pragma once
// Which peers an Ako node still exchanges with, and whether it may go on (Ako SoCC'16 sec. 4.3;
// the quorum of sync/quorum.h).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "sync/quorum.h"

namespace gradmesh::sync::ako {

/// The live view of an Ako job from one node: which peers failed and were dropped (their clocks
/// and rounds left out; Ako goes on without them, sec. 4.3), which came back, and, when the live
/// nodes fall below the quorum (net.min_nodes, else a majority), the error that cuts this node
/// off: stored once, the first wins, and rethrown by check().
///
/// Thread safety: every method may be called from any thread; drop() and take_back() of one peer
/// are atomic (a failure reported twice counts once).
class Membership {
 public:
  /// This node is `rank` of `nodes`; `min_nodes`: net.min_nodes (nullopt: a majority).
  Membership(std::size_t rank, std::size_t nodes, std::optional<std::size_t> min_nodes);

  /// What drop() did.
  struct Dropped {
    std::size_t live = 0;       ///< live nodes after the drop, this node included
    bool quorum_holds = false;  ///< `live` may go on (else the caller cuts this node off)
  };
  /// Marks peer `peer` failed. Returns nullopt when it is this node, out of range or dropped
  /// already (a failure reported twice); else the live count after it.
  [[nodiscard]] std::optional<Dropped> drop(std::size_t peer);
  /// Takes a dropped peer back (it restarted and rejoined). Returns the live count after it, or
  /// nullopt when `peer` was not dropped (or is this node, or out of range).
  [[nodiscard]] std::optional<std::size_t> take_back(std::size_t peer);

  /// Whether peer `peer` is dropped (acquire). False for this node.
  [[nodiscard]] bool dead(std::size_t peer) const noexcept {
    return dead_[peer].load(std::memory_order_acquire);
  }
  /// Live nodes, this node included (acquire).
  [[nodiscard]] std::size_t live() const noexcept { return live_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint64_t failures() const noexcept { return failures_.load(); }
  [[nodiscard]] std::uint64_t rejoins() const noexcept { return rejoins_.load(); }

  /// Cuts this node off: stores the error naming every dropped peer ("rank r (address(r))"), how
  /// many of the nodes that is, `last` (the latest failure) and the rule (Quorum::
  /// cut_off_message). Returns its message when this call stored it; nullopt when an earlier one
  /// did (the first wins).
  [[nodiscard]] std::optional<std::string> cut_off(
      const std::function<std::string(std::size_t rank)>& address, const std::string& last);
  /// Throws the stored cut-off error (gradmesh::Error) if this node was cut off.
  void check() const;

 private:
  const std::size_t rank_;
  const std::size_t nodes_;
  const Quorum quorum_;
  std::unique_ptr<std::atomic<bool>[]> dead_;  // per rank
  std::atomic<std::size_t> live_;
  std::atomic<std::uint64_t> failures_{0};  // drops (a peer that rejoined and failed again: 2)
  std::atomic<std::uint64_t> rejoins_{0};
  mutable std::mutex mutex_;
  std::exception_ptr cut_off_;  // under mutex_
};

}  // namespace gradmesh::sync::ako

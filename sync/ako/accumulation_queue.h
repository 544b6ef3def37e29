#pragma once
// Ako's accumulation queue: the last p round gradients in a ring of p preallocated buffers and
// their running sum g* (Ako SoCC'16 sec. 3.1 "Gradient accumulation", Fig. 6; Algorithm 1 line 6;
// sec. 4.2 step 2).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sync/ako/range_partition.h"

namespace gradmesh::sync::ako {

/// Holds, for the round being filled (the *open* round r) and the p - 1 rounds sent before it,
/// each round's gradient G_r (the sum of the local gradients folded while r was open: exactly one
/// per round when rounds keep up with compute, as in the paper), and the accumulated gradient
///
///     g*_r = G_(r-p+1) + ... + G_r                    (Algorithm 1 line 6, incrementally:
///     g*_r = g*_(r-1) + G_r - G_(r-p))                 g*_t = g*_(t-1) + g_t - g_(t-p))
///
/// Use: add() every local gradient (one or more per round), read accumulated() to copy the
/// partitions of round r out, then advance() to open round r + 1. G_(r+1-p) leaves g* lazily: at
/// round r + 1's first add(), in the same pass that stores G_(r+1) in its slot (or, if round r + 1
/// has no gradient yet, when it is read or closed). Every added gradient is in exactly p
/// consecutive g*_r: the rounds from the one it was added in on. With the rotation of
/// RangePartition this sends every gradient's range k to every peer exactly once (the exactly-once
/// identity tested in tests/sync/ako/).
///
/// Memory: (p + 1) x m floats, allocated in the constructor; add() and advance() never allocate.
/// Cost per round of one gradient (the paper's steady state): one pass over m floats that reads
/// 3m (g, the slot, g*) and writes 2m (the slot, g*); advance() touches nothing then. A round
/// with no gradient costs a separate pass (reads 2m, writes 2m) when it is read or closed.
/// Thread safety: none; one owner (Ako's network tasks, serialised by AkoStage).
class AccumulationQueue {
 public:
  /// p >= 1 slots of m >= 1 floats; else gradmesh::ContractError.
  AccumulationQueue(std::size_t floats, std::size_t partitions);

  /// Folds one gradient (m floats, else gradmesh::ContractError) into the open round: G_r += g,
  /// g* += g.
  void add(std::span<const float> gradient);
  /// g*_r of the open round: m floats, valid until the next add() or advance().
  [[nodiscard]] std::span<const float> accumulated() const;
  /// Closes the open round and opens the next.
  void advance();

  /// G_r, the gradients added in round r (m floats), for the p rounds still in the ring:
  /// round() - p < r <= round() (r = round() is the open one). ContractError otherwise. Valid
  /// until the next add() or advance().
  [[nodiscard]] std::span<const float> round_gradient(std::uint64_t r) const;

  /// The sum of G_s over `range` for the `window` rounds that end with the open one,
  /// round() - window < s <= round() (rounds before the first count as empty): what a peer whose
  /// link has `window` partitions receives in this round (AkoStage, links of different speeds).
  /// With window == partitions() it equals accumulated() over `range`. `out`: range.size floats,
  /// overwritten. ContractError for a window of 0 or above partitions(), a range past m, or a
  /// wrong `out` size. Cost: window x range.size floats read; no allocation.
  void window_sum(Range range, std::size_t window, std::span<float> out) const;

  /// The open round's index, from 0.
  [[nodiscard]] std::uint64_t round() const noexcept { return round_; }
  /// Gradients add()ed while the current round was open.
  [[nodiscard]] std::size_t pending() const noexcept { return pending_; }
  [[nodiscard]] std::size_t partitions() const noexcept { return partitions_; }
  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }

 private:
  // G_(r-p) leaves g* lazily (retire_open()): a logically const step, hence mutable.
  void retire_open() const;
  // Round r's slot: slot r mod p of the ring, m floats.
  [[nodiscard]] float* slot_of(std::uint64_t r) const noexcept;

  std::size_t floats_;
  std::size_t partitions_;
  mutable std::vector<float> slots_;        // p slots of m floats: slot (r mod p) holds G_r
  mutable std::vector<float> accumulated_;  // g*, m floats
  std::uint64_t round_ = 0;
  std::size_t pending_ = 0;
  // Whether G_(r-p) has left g* and the open round's slot holds G_r (else it still holds G_(r-p)).
  mutable bool open_retired_ = false;
};

/// The part of the gradients in `queue` that peer `peer` has not received yet, given that each
/// closed round r sent that peer range partition.range_for(peer, r) of the sum of its last
/// partition.partitions() round gradients (AkoStage's rotation; g*_r when the link's p is the
/// queue's, window_sum() when a link has fewer partitions than the ring holds):
/// for every range k, the sum of G_s over the rounds s after the last one that sent k to the peer,
/// the open round included. A node that sends this to the peer (once, whole) has delivered every
/// gradient it added exactly once (Ako's exactly-once identity, sec. 3.1, completed early): that
/// is how AkoStage changes p mid-job and ends a job without p - 1 drain rounds.
///
/// `out`: m floats, overwritten. ContractError when `partition` does not match the queue (its
/// floats, or a p above the queue's). Cost: about m (p + 1) / 2 floats read; no allocation.
void undelivered(const AccumulationQueue& queue, const RangePartition& partition, std::size_t peer,
                 std::span<float> out);

}  // namespace gradmesh::sync::ako

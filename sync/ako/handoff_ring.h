#pragma once
// The hand-off of gradients from Ako's compute tasks to its network tasks (Ako SoCC'16 sec. 4.2,
// Fig. 7: compute tasks never wait for the network; network tasks send one round per gradient, and
// accumulate only when they fall behind).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace gradmesh::sync::ako {

/// A ring of `slots` preallocated gradient buffers (m floats each) between one producer (the
/// compute side, put()) and one consumer (the network side, claim() / release()).
///
/// put() copies the gradient into the next free slot, so a network side that is scheduled late
/// still finds one gradient per slot and sends one round per gradient, as the paper's worker does.
/// Only when every slot is taken does put() add the gradient into the newest slot the consumer has
/// not claimed, so that slot then holds the sum of several gradients (count > 1): the network is
/// behind, and Ako accumulates (sec. 4.2). Nothing is lost or counted twice: the counts of the
/// slots claimed sum to the number of gradients put.
///
/// Memory: slots x m floats, allocated in the constructor; put(), claim() and release() never
/// allocate. Cost: put() copies (or adds) m floats under the ring's mutex.
/// Thread safety: put() from one thread, claim() / release() from another (or the same); every
/// member is safe to call concurrently with the others. At most one slot is claimed at a time.
class HandoffRing {
 public:
  /// What claim() lends: the slot's gradient (m floats; the sum of `count` gradients).
  struct Claimed {
    std::span<const float> gradient;
    std::uint64_t count = 0;
  };

  /// `floats` = m >= 1 and `slots` >= 2, else gradmesh::ContractError.
  HandoffRing(std::size_t floats, std::size_t slots);

  /// Hands off one gradient (m floats, else gradmesh::ContractError).
  void put(std::span<const float> gradient);
  /// The oldest filled slot, claimed until release(); nullopt when none is filled. The span stays
  /// valid and unchanged until release(). ContractError if a slot is already claimed.
  [[nodiscard]] std::optional<Claimed> claim();
  /// Frees the claimed slot for put(). ContractError if none is claimed.
  void release();

  /// Filled slots not yet claimed.
  [[nodiscard]] std::size_t filled() const;
  /// Gradients in the filled, unclaimed slots.
  [[nodiscard]] std::uint64_t pending_gradients() const;
  [[nodiscard]] std::size_t slots() const noexcept { return slots_; }
  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }

 private:
  std::size_t floats_;
  std::size_t slots_;
  mutable std::mutex mutex_;
  std::vector<float> buffers_;         // slots x m floats
  std::vector<std::uint64_t> counts_;  // per slot: gradients in it (0: free)
  std::size_t head_ = 0;               // oldest filled (or claimed) slot
  std::size_t used_ = 0;               // filled + claimed slots, from head_ on
  bool claimed_ = false;               // slot head_ is lent to the consumer
};

}  // namespace gradmesh::sync::ako

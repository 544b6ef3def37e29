#pragma once
// Range partitioning of the flattened gradient into p contiguous near-equal ranges, and the
// round-robin choice of the range each peer receives (Ako SoCC'16 sec. 3.1, Algorithm 1 lines 7-9,
// sec. 4.2 steps 3-4).

#include <cstddef>
#include <cstdint>

namespace gradmesh::sync::ako {

/// One range of the flattened parameter / gradient vector, in floats.
struct Range {
  std::size_t offset = 0;  ///< first float
  std::size_t size = 0;    ///< floats
};

/// Splits m floats into p contiguous ranges: the first (m mod p) ranges hold ceil(m / p) floats,
/// the others floor(m / p), so sizes differ by at most one and the ranges cover [0, m) in order.
///
/// Rotation: in round t peer i receives range (i + t) mod p (Algorithm 1 line 9, read as the text
/// of sec. 3.1 means it — see shared/papers/README.md), so within any p consecutive rounds a peer
/// receives every range exactly once.
///
/// Thread safety: immutable after construction; any thread may read it.
class RangePartition {
 public:
  /// `floats` = m >= 1, `partitions` = p with 1 <= p <= m; else gradmesh::ConfigError (p) or
  /// gradmesh::ContractError (m).
  RangePartition(std::size_t floats, std::size_t partitions);

  /// p.
  [[nodiscard]] std::size_t partitions() const noexcept { return partitions_; }
  /// m, floats.
  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }
  /// Range k (k < p, else gradmesh::ContractError).
  [[nodiscard]] Range range(std::size_t k) const;
  /// The largest range's size, ceil(m / p) floats.
  [[nodiscard]] std::size_t max_range_floats() const noexcept;
  /// The range peer `peer` receives in round `round`: (peer + round) mod p.
  [[nodiscard]] std::size_t range_for(std::size_t peer, std::uint64_t round) const noexcept {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(peer) + round) % partitions_);
  }

 private:
  std::size_t floats_;
  std::size_t partitions_;
};

}  // namespace gradmesh::sync::ako

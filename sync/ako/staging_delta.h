#pragma once
// The update an Ako node has received from its peers and not yet folded into its replica
// (Ako SoCC'16 Algorithm 1, line 13).

#include <cstddef>
#include <mutex>
#include <span>
#include <vector>

namespace gradmesh::sync::ako {

/// A model-sized delta that the receiving side adds peers' partitions into (-lr x partition,
/// line 13) while the compute side trains, and that the compute side folds into the parameters
/// at an iteration boundary (ako_apply). Only the blocks touched since the last fold are visited,
/// so a fold after a few partitions of a large model costs what they touched.
///
/// Memory: floats x 4 bytes plus one byte per kBlock floats, allocated once. Thread safety: any
/// thread; add() and apply_to() take an internal mutex.
class StagingDelta {
 public:
  /// Touched regions are tracked in blocks of this many floats (any p's ranges map onto them).
  static constexpr std::size_t kBlock = 16384;

  /// A zero delta of `floats` floats (the model's m).
  explicit StagingDelta(std::size_t floats);

  [[nodiscard]] std::size_t size() const noexcept { return delta_.size(); }

  /// delta[offset + i] += scale x values[i] for every i. Throws gradmesh::ContractError when the
  /// range does not lie within the delta (nothing added).
  void add(std::size_t offset, std::span<const float> values, float scale);

  /// parameters += delta, then delta = 0, over the blocks touched since the last call. Returns
  /// how many floats it visited. Throws gradmesh::ContractError when `parameters` is not size()
  /// floats long.
  std::size_t apply_to(std::span<float> parameters);

 private:
  std::mutex mutex_;
  std::vector<float> delta_;
  std::vector<char> dirty_;  // per kBlock floats: touched since the last apply_to()
};

}  // namespace gradmesh::sync::ako

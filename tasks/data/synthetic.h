#pragma once
// Synthetic data for throughput at any input size (issue 29 item 4; data.dataset = "synthetic"):
// no files, every example a pure function of (seed, index), so each node generates its own
// batches and all nodes agree on every example without reading or sending anything. Horovod's
// synthetic benchmark (its `pytorch_synthetic_benchmark.py`) feeds one fixed random batch, which
// no model can learn from; these examples carry a class signal, so a run's loss and accuracy still
// say whether training works.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tasks/data/dataset.h"
#include "tasks/shape.h"

namespace gradmesh::tasks {

/// The index of a synthetic test set's first example: far above any training index, so the
/// test examples are never trained on.
inline constexpr std::uint64_t kSyntheticTestBase = std::uint64_t{1} << 48;

/// A classification task of `classes` classes over inputs of `shape`: example i has the label
/// y_i = mix(seed, i) mod classes and the input x_i = prototype[y_i] + noise_i, every float of a
/// prototype and of the noise uniform in [-1, 1), the prototypes drawn from `seed`, the noise from
/// (seed, i) (tasks::SplitMix64). The same on every platform and node.
///
/// Memory: the prototypes, classes x features floats. Thread safety: const after construction;
/// write() and label() may run on any threads at once.
class SyntheticTask {
 public:
  /// Throws gradmesh::ConfigError if the shape holds no float or classes < 2.
  SyntheticTask(Shape shape, std::size_t classes, std::uint64_t seed);

  [[nodiscard]] Shape shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t features() const noexcept { return features_; }
  [[nodiscard]] std::size_t classes() const noexcept { return classes_; }

  /// y_i, in [0, classes).
  [[nodiscard]] std::int32_t label(std::uint64_t index) const noexcept;
  /// Writes x_i into `out` (features() floats). No allocation: one SplitMix64 draw per float.
  /// Throws gradmesh::ContractError for another size.
  void write(std::uint64_t index, std::span<float> out) const;
  /// Examples first .. first + count - 1 as a Dataset (shape(), classes()): a test set, or what
  /// a training source generates batch by batch. Allocates count x features floats.
  [[nodiscard]] Dataset make(std::uint64_t first, std::size_t count) const;

 private:
  Shape shape_;
  std::size_t features_;
  std::size_t classes_;
  std::uint64_t seed_;
  std::vector<float> prototypes_;  // classes x features
};

}  // namespace gradmesh::tasks

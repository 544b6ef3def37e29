#pragma once
// Data sharding for data-parallel training: each node (rank) trains on its own disjoint shard of
// the training set and reshuffles it every epoch, deterministically, so runs are reproducible and
// every node agrees on the number of iterations per epoch without talking.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tasks/data/dataset.h"

namespace gradmesh::tasks {

/// The mini-batches one rank draws from its shard.
///
/// Shards: one permutation of [0, N) from `seed` (the same on every node); rank r owns the
/// permuted positions [r*N/n, (r+1)*N/n). Shards are disjoint, cover [0, N), and their sizes
/// differ by at most 1. Each epoch the shard is put in a fresh order that depends only on
/// (seed, epoch, rank); iteration i takes positions [i*B, (i+1)*B) of that order. All randomness
/// comes from gradmesh's SplitMix64 and Fisher–Yates, so every platform gets the same batches.
///
/// Thread safety: batch_indices() is non-const — it caches the current epoch's order — so one
/// sampler must not be used by two threads at once; use one sampler per data-source task.
/// Memory: the shard and the epoch order, 2 * shard_size() indices, allocated in the constructor.
class ShardSampler {
 public:
  /// Throws gradmesh::ConfigError if nodes == 0, rank >= nodes, batch_size == 0, or
  /// iterations_per_epoch(dataset_size, nodes, batch_size) == 0 (a shard smaller than a batch).
  ShardSampler(std::size_t dataset_size, std::size_t nodes, std::size_t rank,
               std::size_t batch_size, std::uint64_t seed);

  /// Number of examples this rank owns: floor or ceil of N / nodes.
  [[nodiscard]] std::size_t shard_size() const noexcept { return shard_.size(); }
  /// The data set indices this rank owns, in the seed's permutation order (not sorted).
  [[nodiscard]] std::span<const std::size_t> shard() const noexcept { return shard_; }
  /// Examples per batch (B).
  [[nodiscard]] std::size_t batch_size() const noexcept { return batch_size_; }
  /// Iterations per epoch of this job, the same on every rank (see the static overload).
  [[nodiscard]] std::size_t iterations_per_epoch() const noexcept { return iterations_; }

  /// Iterations per epoch agreed by rule, without communication: floor(smallest shard / batch)
  /// = floor(floor(N / nodes) / batch). The last examples of the larger shards are left out of
  /// that epoch (they are in other epochs' batches, as each epoch reshuffles).
  /// Throws gradmesh::ConfigError if nodes == 0, batch_size == 0, or the result is 0.
  static std::size_t iterations_per_epoch(std::size_t dataset_size, std::size_t nodes,
                                          std::size_t batch_size);

  /// Writes the data set indices of batch `iteration` of `epoch` into `out`
  /// (out.size() == batch_size()). A deterministic function of (seed, epoch, rank, iteration);
  /// every index is in this rank's shard and no index repeats within an epoch. Reshuffles (O(shard
  /// size), no allocation) when `epoch` differs from the previous call's. Throws
  /// gradmesh::ContractError if out.size() != batch_size() or iteration >= iterations_per_epoch().
  void batch_indices(std::size_t epoch, std::size_t iteration, std::span<std::size_t> out);

 private:
  void reshuffle(std::size_t epoch);

  std::size_t rank_;
  std::size_t batch_size_;
  std::uint64_t seed_;
  std::size_t iterations_;
  std::vector<std::size_t> shard_;        // this rank's indices, permutation order
  std::vector<std::size_t> epoch_order_;  // shard_ reshuffled for cached_epoch_
  std::size_t cached_epoch_ = 0;
  bool have_epoch_ = false;
};

/// Copies examples `indices` of `d` into x_out (indices.size() x d.features, row-major) and y_out
/// (indices.size()). No allocation. Thread safety: reads d; writes only the outputs. Throws
/// gradmesh::ContractError if an output has the wrong size or an index is >= d.count.
void gather_batch(const Dataset& d, std::span<const std::size_t> indices, std::span<float> x_out,
                  std::span<std::int32_t> y_out);

}  // namespace gradmesh::tasks

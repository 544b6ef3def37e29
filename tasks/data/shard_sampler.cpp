#include "tasks/data/shard_sampler.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::tasks {
namespace {

// Streams of derive_seed(): distinct so the shard permutation and epoch orders are unrelated.
constexpr std::uint64_t kShardStream = 0x5348415244ULL;  // "SHARD"
constexpr std::uint64_t kEpochStream = 0x45504F4348ULL;  // "EPOCH"

}  // namespace

std::size_t ShardSampler::iterations_per_epoch(std::size_t dataset_size, std::size_t nodes,
                                               std::size_t batch_size) {
  if (nodes == 0) throw ConfigError("sharding: expected nodes >= 1, got 0");
  if (batch_size == 0) throw ConfigError("sharding: expected batch_size >= 1, got 0");
  const std::size_t smallest_shard = dataset_size / nodes;
  const std::size_t iterations = smallest_shard / batch_size;
  if (iterations == 0) {
    throw ConfigError("sharding: " + std::to_string(dataset_size) + " examples over " +
                      std::to_string(nodes) + " nodes gives shards of " +
                      std::to_string(smallest_shard) + ", smaller than batch_size " +
                      std::to_string(batch_size) + "; expected at least one batch per shard");
  }
  return iterations;
}

ShardSampler::ShardSampler(std::size_t dataset_size, std::size_t nodes, std::size_t rank,
                           std::size_t batch_size, std::uint64_t seed)
    : rank_(rank),
      batch_size_(batch_size),
      seed_(seed),
      iterations_(iterations_per_epoch(dataset_size, nodes, batch_size)) {
  if (rank >= nodes) {
    throw ConfigError("sharding: expected rank < nodes (" + std::to_string(nodes) + "), got " +
                      std::to_string(rank));
  }
  // The same permutation of [0, N) on every node; this rank keeps its slice.
  std::vector<std::size_t> all(dataset_size);
  std::iota(all.begin(), all.end(), std::size_t{0});
  SplitMix64 rng(derive_seed(seed, kShardStream));
  fisher_yates_shuffle(std::span<std::size_t>(all), rng);
  // r*N/n without overflow for any realistic N (N * n < 2^64).
  const std::size_t begin = rank * dataset_size / nodes;
  const std::size_t end = (rank + 1) * dataset_size / nodes;
  shard_.assign(all.begin() + static_cast<std::ptrdiff_t>(begin),
                all.begin() + static_cast<std::ptrdiff_t>(end));
  epoch_order_.resize(shard_.size());
}

void ShardSampler::reshuffle(std::size_t epoch) {
  std::copy(shard_.begin(), shard_.end(), epoch_order_.begin());
  SplitMix64 rng(derive_seed(derive_seed(derive_seed(seed_, kEpochStream), epoch), rank_));
  fisher_yates_shuffle(std::span<std::size_t>(epoch_order_), rng);
  cached_epoch_ = epoch;
  have_epoch_ = true;
}

void ShardSampler::batch_indices(std::size_t epoch, std::size_t iteration,
                                 std::span<std::size_t> out) {
  GRADMESH_CHECK_EQ(out.size(), batch_size_, "batch_indices: output size");
  GRADMESH_CHECK_LT(iteration, iterations_, "batch_indices: iteration out of the epoch");
  if (!have_epoch_ || cached_epoch_ != epoch) reshuffle(epoch);
  const auto first = epoch_order_.begin() + static_cast<std::ptrdiff_t>(iteration * batch_size_);
  std::copy(first, first + static_cast<std::ptrdiff_t>(batch_size_), out.begin());
}

void gather_batch(const Dataset& d, std::span<const std::size_t> indices, std::span<float> x_out,
                  std::span<std::int32_t> y_out) {
  GRADMESH_CHECK_EQ(x_out.size(), indices.size() * d.features, "gather_batch: x_out size");
  GRADMESH_CHECK_EQ(y_out.size(), indices.size(), "gather_batch: y_out size");
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::size_t src = indices[i];
    GRADMESH_CHECK_LT(src, d.count, "gather_batch: example index");
    const auto row = d.x.begin() + static_cast<std::ptrdiff_t>(src * d.features);
    std::copy(row, row + static_cast<std::ptrdiff_t>(d.features),
              x_out.begin() + static_cast<std::ptrdiff_t>(i * d.features));
    y_out[i] = d.y[src];
  }
}

}  // namespace gradmesh::tasks

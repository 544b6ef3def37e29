#pragma once
// The training pipeline of one node as a task graph: one run of the graph is one iteration.
//
//   load -> forward_0 -> ... -> forward_{L-1} -> loss -> backward_{L-1} -> ... -> backward_0 -> done
//                                                         |                          |
//                                  the sync stage hangs its tasks here (WFBP) -------+--> done
//
// The load task is stateful: it owns the node's shard sampler and walks the epochs by itself.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/executor.h"
#include "engine/graph.h"
#include "sync/sync_stage.h"
#include "tasks/data/dataset.h"
#include "tasks/data/shard_sampler.h"
#include "tasks/model.h"

namespace gradmesh::app {

/// Where this node's data comes from and how it is cut into batches.
struct TrainerOptions {
  std::size_t rank = 0;
  std::size_t nodes = 1;
  std::size_t batch_size = 64;  ///< K, samples per node per iteration
  std::uint64_t seed = 42;
};

/// Builds and runs one node's iteration graph. The model, data, executor and sync stage must
/// outlive the Trainer. Not thread-safe: drive it from one thread.
class Trainer {
 public:
  /// Throws ConfigError when the training set gives no full batch per node
  /// (tasks::ShardSampler::iterations_per_epoch).
  Trainer(tasks::Model& model, const tasks::Dataset& train, engine::Executor& executor,
          sync::SyncStage& stage, TrainerOptions options);

  /// Runs one iteration (forward, backward, sync) on the next batch of this node's shard and
  /// returns its mean training loss (nats). Rethrows the first task error (e.g. a PeerError).
  float step();

  /// Iterations per epoch: the same number on every node, by rule (the smallest shard's full
  /// batches), so nodes with uneven shards never wait for each other forever.
  [[nodiscard]] std::size_t iterations_per_epoch() const noexcept { return iterations_per_epoch_; }
  /// Iterations run so far.
  [[nodiscard]] std::uint64_t iterations() const noexcept { return graph_.runs(); }
  [[nodiscard]] engine::Graph& graph() noexcept { return graph_; }

 private:
  struct LoadState {
    tasks::ShardSampler sampler;
    std::vector<std::size_t> indices;
    std::vector<std::int32_t> labels;
    std::size_t iterations_per_epoch;
  };
  struct LossState {
    float loss = 0.0f;
  };

  tasks::Model& model_;
  engine::Executor& executor_;
  std::size_t iterations_per_epoch_;
  engine::Graph graph_;
  engine::TaskHandle load_;
  engine::TaskHandle loss_;
};

}  // namespace gradmesh::app

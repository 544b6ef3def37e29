#pragma once
// The graph of one training iteration (DESIGN.md "Users' own pipelines"): one run of it is one
// iteration on one node.
//
//   source -> preprocess_0 -> ... -> forward_0 -> ... -> forward_{L-1} -> loss
//          -> backward_{L-1} -> ... -> backward_0 -> done
//                  |                       |
//                  +--- the sync stage's tasks hang here (WFBP) ---> done
//
// The source task is stateful: it owns the batch (labels, epoch and iteration) and asks the data
// source for the next batch of this node's shard; the pre-processing tasks rewrite that batch in
// place before the first layer reads it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/pipeline/data_source.h"
#include "engine/executor.h"
#include "engine/graph.h"
#include "sync/sync_stage.h"
#include "tasks/model.h"

namespace gradmesh::app {

/// The data source's class name (demangled), for errors about its batches.
[[nodiscard]] std::string source_name(const DataSource& source);

/// Throws gradmesh::DataError unless every label of `batch` is in [0, classes): naming `source`,
/// the label, its index in the batch, the epoch and the iteration (1-based), and the range.
/// Called before the loss of every iteration (K comparisons).
void check_labels(const Batch& batch, std::size_t classes, const std::string& source);

/// A pre-processing task's work: rewrite `batch` in place (augmentation, normalisation). Runs on
/// the compute arena, once per iteration, after the source and the earlier pre-processing tasks;
/// it must not keep the spans past its return, and should not allocate.
using PreprocessFn = std::function<void(Batch& batch, engine::TaskContext& ctx)>;

/// A named pre-processing task (the name shows in traces and errors).
struct PreprocessTask {
  std::string name;
  PreprocessFn fn;
};

/// The tasks of the iteration graph, for a user who adds tasks and edges of their own (after the
/// graph is built and before it first runs): e.g. a task that reads the logits after the loss.
struct PipelineTasks {
  engine::TaskHandle source;                   ///< fills the batch
  std::vector<engine::TaskHandle> preprocess;  ///< in the order added
  sync::IterationTasks model;  ///< forward_l, backward_l, done (what the sync stage hooks)
  engine::TaskHandle loss;     ///< softmax cross-entropy forward and backward
};

/// Builds and runs one node's iteration graph. The model, source, executor and sync stage must
/// outlive it. Not thread-safe: drive it from one thread.
///
/// Checkpoints (engine::Checkpointable): the state is the data cursor, the iterations done (the
/// source task's next batch is (done / per epoch, done % per epoch)); every other random stream
/// of the data path is a pure function of (job.seed, rank, epoch, iteration) (ShardSampler), so
/// the cursor is its whole state (Poseidon arXiv'15 sec. 4.4: "database pointers unchanged").
class IterationGraph final : public engine::Checkpointable {
 public:
  /// Builds the graph for `source`, already opened for `shard` (DataSource::open returned
  /// `iterations_per_epoch`); the stage adds its tasks (SyncStage::build). Throws ConfigError
  /// when iterations_per_epoch is 0 or the source's sample shape is not the model's input shape.
  IterationGraph(tasks::Model& model, DataSource& source, std::vector<PreprocessTask> preprocess,
                 engine::Executor& executor, sync::SyncStage& stage, const ShardInfo& shard,
                 std::size_t iterations_per_epoch);

  /// Runs one iteration (source, pre-processing, forward, backward, sync) on the next batch and
  /// returns its mean training loss (nats). Rethrows the first task error (e.g. a PeerError).
  float step();

  /// Iterations per epoch (DataSource::open: the same on every node).
  [[nodiscard]] std::size_t iterations_per_epoch() const noexcept { return iterations_per_epoch_; }
  /// Iterations done: those before a resume (load_state) plus the runs of this graph.
  [[nodiscard]] std::uint64_t iterations() const noexcept {
    return first_iteration_ + graph_.runs();
  }
  /// Writes iterations() and iterations_per_epoch().
  void save_state(engine::StateWriter& out) override;
  /// Continues from the saved iteration: the next step() fills that batch. Throws
  /// CheckpointError when the saved iterations per epoch differ (another data set, n or batch
  /// size), ContractError after the first step().
  void load_state(engine::StateReader& in) override;
  /// Continues from iteration `done` (a node that rejoined a running job: SyncStage::join()):
  /// the next step() fills that batch. ContractError after a step.
  void continue_from(std::uint64_t done);
  [[nodiscard]] engine::Graph& graph() noexcept { return graph_; }
  [[nodiscard]] const PipelineTasks& tasks() const noexcept { return tasks_; }

 private:
  struct SourceState {
    std::vector<std::int32_t> labels;
    Batch batch;
  };
  struct LossState {
    float loss = 0.0f;
  };

  tasks::Model& model_;
  engine::Executor& executor_;
  std::size_t iterations_per_epoch_;
  std::uint64_t first_iteration_ = 0;  // iterations done before this graph's first run (resume)
  engine::Graph graph_;
  PipelineTasks tasks_;
};

}  // namespace gradmesh::app

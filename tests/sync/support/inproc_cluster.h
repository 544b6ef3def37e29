#pragma once
// Test support: n training nodes in one process, peers as threads on the in-process transport, so
// every sync stage can be unit-tested without processes or sockets (STYLE.md practice 7).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/graph.h"
#include "net/inproc/inproc_transport.h"
#include "sync/lane_router.h"
#include "sync/sync_stage.h"
#include "tasks/model.h"
#include "tasks/optim/optimizer.h"

namespace gradmesh::testing {

/// A small synthetic job: `features` inputs, `classes` outputs, the layers, K per node.
struct SyntheticJob {
  std::vector<std::string> layers = {"dense:24", "relu",    "dense:16",
                                     "relu",     "dense:4", "softmax_cross_entropy"};
  std::size_t features = 12;
  std::size_t batch = 8;  ///< K, per node
  std::uint64_t seed = 7;
  tasks::SgdOptions sgd{0.05f, 0.9f, 0.0f};
  /// Adam or AdamW instead of SGD (the node's Optimizer), with sgd's lr and weight decay.
  std::optional<tasks::AdamOptions> adam;
  sync::SyncOptions options;
  /// When set, makes the stage instead of the registry (the strategy name is then ignored).
  std::function<std::unique_ptr<sync::SyncStage>(sync::SyncContext)> factory;
  /// When set, makes each node's compute backend (e.g. tests/tasks/emulated_device.h, so the
  /// Model's device path runs); unset: the CPU backend.
  std::function<std::unique_ptr<tasks::Backend>()> backend;
  /// What the stage is told the start-up probe measured (SyncContext::measured); nullptr: nothing.
  const sync::JobMeasurements* measured = nullptr;
  /// net.min_nodes (SyncContext::min_nodes); nullopt: a majority.
  std::optional<std::size_t> min_nodes;
  /// The iteration whose batches a node's first run trains on (a resumed job's next iteration).
  std::uint64_t first_iteration = 0;
};

/// Node `rank`'s batch of iteration `iteration`: K rows of `features` floats and K labels in
/// [0, classes), a fixed function of (seed, rank, iteration), so that the union over ranks is
/// known.
void synthetic_batch(const SyntheticJob& job, std::size_t classes, std::size_t rank,
                     std::uint64_t iteration, std::size_t batch, std::span<float> x,
                     std::span<std::int32_t> y);

/// One node: model, optimizer, executor, stage, and the graph of one iteration (forward, loss,
/// backward per layer, the stage's tasks), reading synthetic_batch(rank, run).
class InProcNode {
 public:
  /// `data_ranks`: the ranks whose batches this node trains on, concatenated (a single-process
  /// reference takes all of them with strategy none and batch n K).
  InProcNode(const SyntheticJob& job, std::string strategy, std::size_t rank, std::size_t nodes,
             net::Transport* transport, std::vector<std::size_t> data_ranks);
  ~InProcNode();
  /// Runs one iteration; returns the mean loss. Throws what a task threw (a PeerError, say).
  float step();
  tasks::Model& model() noexcept { return model_; }
  sync::SyncStage& stage() noexcept { return *stage_; }
  tasks::Optimizer& optimizer() noexcept { return optimizer_; }

 private:
  SyntheticJob job_;
  std::vector<std::size_t> data_ranks_;
  std::size_t batch_;
  tasks::Model model_;
  tasks::Optimizer optimizer_;
  engine::Executor executor_;
  sync::LaneRouter router_;
  std::unique_ptr<sync::SyncStage> stage_;
  engine::Graph graph_;
  std::vector<std::int32_t> labels_;
  float loss_ = 0;
  std::uint64_t steps_ = 0;  // step() calls: Adam's t is first_iteration + steps_
};

/// n InProcNodes of one strategy on one in-process mesh (started), plus helpers.
class InProcCluster {
 public:
  InProcCluster(const SyntheticJob& job, const std::string& strategy, std::size_t nodes);
  ~InProcCluster();
  /// Runs `iterations` on every node, each node on its own thread; rethrows the first error.
  void train(std::uint64_t iterations);
  /// As train(), node r running `iterations[r]` iterations (a node that stops early: quorum
  /// rounds go on without it) or until its stage says the job ended (SyncStage::ended(), as the
  /// node's loop does), then, when `finish`, SyncStage::finish() on the same thread (as a node
  /// does: a node that ends first does not wait for the others' training). Returns the
  /// iterations each node ran.
  std::vector<std::uint64_t> train_each(const std::vector<std::uint64_t>& iterations,
                                        bool finish = false);
  /// finish() on every node at once (an asynchronous strategy completes its exchange).
  void finish();
  InProcNode& node(std::size_t rank) { return *nodes_.at(rank); }
  net::InProcTransport& transport(std::size_t rank) { return *transports_.at(rank); }
  [[nodiscard]] std::size_t size() const noexcept { return nodes_.size(); }

 private:
  std::vector<std::unique_ptr<net::InProcTransport>> transports_;
  std::vector<std::unique_ptr<InProcNode>> nodes_;
};

/// The BSP reference of `nodes` nodes of `job`: one node, strategy none, trained `iterations`
/// iterations on the n nodes' batches concatenated (batch n K); its parameters. `job`'s factory
/// and sync options are not used (a single node plans every layer local).
[[nodiscard]] std::vector<float> union_reference(SyntheticJob job, std::size_t nodes,
                                                 std::uint64_t iterations);

/// Each node's parameters (index = rank), for "every replica holds the same bits" checks.
[[nodiscard]] std::vector<std::vector<float>> replicas(InProcCluster& cluster);

/// Node `rank`'s replica of `job` trained alone for `iterations` iterations from parameters
/// `start` (strategy none on its own batches, from iteration `first`), as a local SGD node's
/// inner steps are; its SGD velocity is carried in `velocity` (in and out; empty: zero).
/// Returns the parameters.
[[nodiscard]] std::vector<float> train_alone(const SyntheticJob& job, std::size_t rank,
                                             const std::vector<float>& start,
                                             std::vector<float>& velocity, std::uint64_t first,
                                             std::uint64_t iterations);

/// Each node's model, optimizer and stage state (index = rank), as a checkpoint holds them.
[[nodiscard]] std::vector<std::vector<std::byte>> save_nodes(InProcCluster& cluster);
/// Loads save_nodes()'s states into `cluster`'s nodes (same node count). Throws as the states'
/// load_state.
void load_nodes(InProcCluster& cluster, const std::vector<std::vector<std::byte>>& saved);

/// A stop and a resume: `job` under `strategy` on `nodes` in-process nodes trained `stop`
/// iterations and saved (save_nodes(), into *saved when given), then a new cluster from iteration
/// `stop` that loads the states and trains to `total`, finished (SyncStage::finish) when
/// `finish`. Returns that cluster's replicas (by rank).
[[nodiscard]] std::vector<std::vector<float>> resumed_replicas(
    const SyntheticJob& job, const std::string& strategy, std::size_t nodes, std::size_t stop,
    std::size_t total, bool finish, std::vector<std::vector<std::byte>>* saved = nullptr);

/// Largest |a_i - b_i|.
[[nodiscard]] double max_abs_difference(std::span<const float> a, std::span<const float> b);

}  // namespace gradmesh::testing

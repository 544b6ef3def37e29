#pragma once
// NodeState, what one node's job holds (internal to apps/pipeline): the Pipeline facade
// (pipeline.cpp) owns it, NodeBuilder (node_builder.h) fills it from the config, TrainingLoop
// (training_loop.h) runs it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/config/job_config.h"
#include "apps/pipeline/iteration_graph.h"
#include "apps/pipeline/pipeline.h"
#include "apps/pipeline/progress.h"
#include "apps/recovery/checkpoint_file.h"
#include "apps/recovery/checkpoint_writer.h"
#include "apps/recovery/resume_point.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "engine/trace_recorder.h"
#include "net/transport.h"
#include "sync/lane_router.h"
#include "sync/probe/link_probe.h"
#include "sync/resume/resume_agreement.h"
#include "sync/sync_stage.h"
#include "tasks/model.h"
#include "tasks/optim/optimizer.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

namespace detail {

/// Who this node is in which job: the Pipeline facade sets it at construction (the rank as soon
/// as it is resolved); every other part reads it.
struct NodeIdentity {
  NodeOptions options;
  MembershipView membership;  // run_with_recovery()'s, for this view
  JobConfig config;
  topo::PeerList peers;
  std::size_t rank = 0;
  std::string rank_source;
  ProgressStyle progress_style = ProgressStyle::kLines;  // from options.progress

  [[nodiscard]] std::size_t nodes() const noexcept { return peers.size(); }
  /// Every node's "host:port", in rank order.
  [[nodiscard]] std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (std::size_t r = 0; r < nodes(); ++r) out.push_back(peers[r].address());
    return out;
  }
};

/// What the program gave through the Pipeline's setters (set_source, add_preprocess,
/// set_evaluation, set_test_set, add_observer, add_checkpoint_state): the Pipeline owns them;
/// NodeBuilder hands the source and the pre-processing tasks to the iteration graph.
struct ProgramParts {
  std::unique_ptr<DataSource> source;
  std::vector<PreprocessTask> preprocess;
  EvaluateFn evaluate;
  const tasks::Dataset* test_set = nullptr;  // set_test_set(): the built-in, split evaluation
  std::vector<RunObserver*> observers;       // the program's own, after the built-in
  std::vector<std::pair<std::string, engine::Checkpointable*>> own_states;  // checkpointed too
};

/// This node's replica and its solver: the Pipeline makes them (from model.layers or the
/// program's specs); the stage and the graph step them.
struct Replica {
  std::optional<tasks::Model> model;
  std::optional<tasks::Optimizer> optimizer;
};

/// What the node runs on: its executor, the transport and what routes its frames. NodeBuilder
/// makes them; the stage, the graph and the training loop use them.
struct Runtime {
  engine::Executor executor{{1, 1}};
  std::shared_ptr<engine::TraceRecorder> trace;
  std::unique_ptr<net::Transport> transport;
  bool sealed = false;     // the transport seals its frames (a job secret and security.encrypt)
  bool connected = false;  // the transport started: every peer of this view connected
  std::optional<sync::LaneRouter> router;
  std::optional<sync::LinkProbe> probe;
  std::optional<sync::ResumeAgreement> agreement;
};

/// The plan this node trains by: the sync stage (sync.strategy) and the iteration graph built
/// around it (NodeBuilder::make_stage); the training loop runs them.
struct TrainingPlan {
  std::unique_ptr<sync::SyncStage> stage;
  std::optional<IterationGraph> graph;
  bool ran = false;
};

/// Checkpoints (checkpoint.dir) and --resume (README "Checkpoints and resume"): NodeBuilder
/// sets them up, the training loop loads and saves them.
struct Recovery {
  CheckpointSet checkpoints;  // the pipeline's sections, then ProgramParts::own_states
  // checkpoint.dir set; declared after what it saves, so that its destructor (which waits for the
  // write under way) runs first.
  std::optional<CheckpointWriter> checkpoint_writer;
  std::optional<ResumePoint> resume;  // agreed in build(), loaded in run()
};

/// Everything a node holds for its job, in parts each with one owner (above). Parts are declared
/// in the order they are needed, so that they are destroyed in reverse: the plan before the
/// runtime it routes through. Thread safety: none (the node's thread).
struct NodeState {
  NodeIdentity job;
  ProgramParts program;
  Replica replica;
  Runtime runtime;
  TrainingPlan plan;
  Recovery recovery;

  NodeState(NodeOptions o, MembershipView m, JobConfig c, topo::PeerList p)
      : job{std::move(o), std::move(m), std::move(c), std::move(p)} {}

  /// On every exit path, before the stage, the probe or the router is destroyed: stop the
  /// transport's loop thread (no more handler calls into them; later sends throw instead of
  /// touching freed memory), then let queued network jobs (which refer to them) drain.
  ~NodeState() {
    if (runtime.transport) runtime.transport->close();
    runtime.executor.wait_idle();
  }
};

/// Tells the peers why this node stops (net::Transport::abort_for): a PeerError passes on the
/// rank that failed (a peer that stopped for another's failure names that one), so each peer names
/// the root cause, not this node's hang-up, and survivors that roll back agree on who is gone
/// (run_with_recovery). Nothing when there is no transport (one node). Never throws.
inline void abort_peers(net::Transport* transport, const std::exception& e) noexcept {
  if (transport == nullptr) return;
  if (const auto* peer = dynamic_cast<const PeerError*>(&e)) {
    transport->abort_for(e.what(), peer->root_rank());
  } else {
    transport->abort(e.what());
  }
}

}  // namespace detail

}  // namespace gradmesh::app

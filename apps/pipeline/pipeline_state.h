#pragma once
// Pipeline::State, what one node's job holds (internal to apps/pipeline): shared by pipeline.cpp
// (set-up and the run) and pipeline_checkpoint.cpp (checkpoints and --resume).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/config/job_config.h"
#include "apps/pipeline/iteration_graph.h"
#include "apps/pipeline/pipeline.h"
#include "apps/recovery/checkpoint_file.h"
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

/// Everything a node holds for its job. Members are declared in the order they are needed, so
/// that they are destroyed in reverse: the graph and stage before the router and transport.
struct Pipeline::State {
  NodeOptions options;
  MembershipView membership;  // run_with_recovery()'s, for this view
  JobConfig config;
  topo::PeerList peers;
  std::size_t rank = 0;
  std::string rank_source;

  std::unique_ptr<DataSource> source;
  std::vector<PreprocessTask> preprocess;
  EvaluateFn evaluate;
  std::optional<tasks::Model> model;
  std::optional<tasks::Optimizer> optimizer;

  engine::Executor executor{{1, 1}};
  std::shared_ptr<engine::TraceRecorder> trace;
  std::unique_ptr<net::Transport> transport;
  bool sealed = false;     // the transport seals its frames (a job secret and security.encrypt)
  bool connected = false;  // the transport started: every peer of this view connected
  std::optional<sync::LaneRouter> router;
  std::optional<sync::LinkProbe> probe;
  std::optional<sync::ResumeAgreement> agreement;
  std::unique_ptr<sync::SyncStage> stage;
  std::optional<IterationGraph> graph;
  bool ran = false;
  std::vector<RunObserver*> observers;  // the program's own (add_observer), after the built-in

  // Checkpoints (checkpoint.dir) and --resume: README "Checkpoints and resume".
  std::vector<std::pair<std::string, engine::Checkpointable*>> own_states;  // add_checkpoint_state
  CheckpointSet checkpoints;               // the pipeline's sections, then own_states
  std::optional<CheckpointStore> store;    // checkpoint.dir set
  CheckpointHeader checkpoint_header;      // iteration filled at each save
  std::vector<std::byte> checkpoint_file;  // reused by every save
  // The file write under way (its seconds), at most one; declared after what it uses, so that
  // its destructor (which waits for the write) runs first.
  std::future<double> checkpoint_write;
  std::uint64_t checkpoint_writing = 0;   // the iteration being written
  std::optional<Checkpoint> resume_from;  // agreed in build(), loaded in run()
  std::string resume_source;              // its path
  // Resuming on another node count: the node count and iterations per epoch that wrote it (the
  // cursor and the plan are rewritten for this job in run(): apps/recovery/resplit.h).
  std::size_t resplit_from_nodes = 0;

  State(NodeOptions o, MembershipView m, JobConfig c, topo::PeerList p)
      : options(std::move(o)),
        membership(std::move(m)),
        config(std::move(c)),
        peers(std::move(p)) {}

  /// On every exit path, before the stage, the probe or the router is destroyed: stop the
  /// transport's loop thread (no more handler calls into them; later sends throw instead of
  /// touching freed memory), then let queued network jobs (which refer to them) drain.
  ~State() {
    if (transport) transport->close();
    executor.wait_idle();
  }

  [[nodiscard]] std::size_t nodes() const noexcept { return peers.size(); }
};

}  // namespace gradmesh::app

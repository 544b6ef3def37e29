#pragma once
// The sync stage: one interface for every strategy that keeps the model replicas in step
// (DESIGN.md; STYLE.md practice 2). A strategy adds its tasks to each node's iteration graph, right
// after the backward task of each layer, so it can start communicating the moment that layer's
// gradient exists (wait-free backpropagation, Poseidon ATC'17 sec. 3.1).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/executor.h"
#include "engine/graph.h"
#include "sync/option_table.h"
#include "sync/plan_options.h"
#include "tasks/model.h"
#include "tasks/optim/optimizer.h"
#include "topo/planner.h"

namespace gradmesh::sync {

class LaneRouter;
struct JobMeasurements;

/// The options a sync stage reads: the strategies' and schemes' own tables [sync.<table>] (each
/// declared and read in its own folder, e.g. sync::ako_options()), the planner's inputs, and the
/// send cap. Plain value type.
struct SyncOptions {
  OptionValues values;                  ///< sync.<table>.<key>, by "<table>.<key>"
  PlannerOptions planner;               ///< planner.*
  std::optional<double> max_send_rate;  ///< net.max_send_rate, bytes/s (Ako's eq. 3 reads it as B)
};

/// The tasks of one training iteration that a sync stage hooks into. Indexed by layer; entries of
/// layers without parameters are valid handles too (a stage simply ignores those layers).
struct IterationTasks {
  std::vector<engine::TaskHandle> forward;  ///< forward_l: computes layer l's output
  std::vector<engine::TaskHandle>
      backward;             ///< backward_l: when it ends, layer l's gradient is final
  engine::TaskHandle done;  ///< the iteration's last task: every stage task must precede it
};

/// Everything a strategy needs from the node. References must outlive the stage.
struct SyncContext {
  tasks::Model& model;
  engine::Executor& executor;
  LaneRouter& router;  ///< the node's router (no transport for a single node)
  std::size_t rank = 0;
  std::size_t nodes = 1;
  std::size_t batch_size = 0;   ///< K, samples per node per iteration
  tasks::Optimizer& optimizer;  ///< the node's one optimizer state (every scheme steps it)
  SyncOptions options;
  /// This node's iterations per epoch (its shard over batch_size; 0: unknown). Ako's gamma probe
  /// spans one epoch, so that per-epoch work (evaluation) weighs in it as in the run.
  std::size_t iterations_per_epoch = 0;
  /// What the start-up probe measured, identical on every node (nullptr: nothing measured; the
  /// planner then assumes AssumedRates). Must outlive the stage's construction.
  const JobMeasurements* measured = nullptr;
  /// This node restarted after it failed and rejoins the running job under its old rank
  /// (gradmesh-node --rejoin): the stage takes its state from a live peer (SyncStage::join()).
  bool rejoin = false;
  /// net.min_nodes: live nodes (this one included) a stage that goes on without failed peers
  /// needs (sync::Quorum); nullopt: more than half of `nodes`.
  std::optional<std::size_t> min_nodes;
};

/// One row of the per-layer plan (DESIGN.md metrics "plan"; `gradmesh-node plan`).
struct LayerPlan {
  std::size_t layer = 0;
  std::string name;   ///< e.g. "dense0"
  std::string shape;  ///< per-sample input -> output: "784->256" (a dense layer's N inputs
                      ///< -> M outputs), "1x28x28->32x28x28" (C x H x W)
  std::size_t parameters = 0;
  std::string scheme;      ///< "PS", "SFB", "local", ...
  std::size_t chunks = 0;  ///< KV chunks of the layer (PS)
  double ps_floats = 0;    ///< Poseidon Table 1: floats per node per iteration under PS (a layer
                           ///< without sufficient factors: its parameter count as M, N = 1)
  double sfb_floats =
      0;  ///< Poseidon Table 1: floats per node per iteration under SFB (dense only)
  double predicted_bytes_sent = 0;  ///< this node, per iteration, payload + frame header bytes
  double predicted_seconds = 0;  ///< the planner's time of the layer's communication and its work
                                 ///< on the compute (predicted_compute_seconds)
  /// The planner's time of the layer's work on the compute, seconds: before its communication a
  /// compressor's encode (top-k, random-k, PS's pushes), after it the optimizer step, SFB's
  /// rebuild GEMM, PowerSGD's GEMMs and passes, 16-bit and sparse decodes.
  double predicted_compute_seconds = 0;
  /// Of that, the compressor's encodes and decodes (PowerSGD: its GEMMs and passes), seconds; 0
  /// for an uncompressed scheme.
  double predicted_codec_seconds = 0;
  /// The transport's work on the layer's bytes sent and received, on the node's compute beside
  /// the backward pass (topo::PlannedLayer::transport_seconds), seconds; 0 when not measured.
  double predicted_transport_seconds = 0;
};

/// A sync strategy. Lifetime: made by make_sync_stage() before the transport starts (it installs
/// the transport's handlers), used for the whole job, then finish() before the transport shuts
/// down.
///
/// Thread safety: build() on the caller's thread before the first run; the tasks it adds run on
/// the executor's arenas; message and failure handlers run on the transport's loop thread.
///
/// Checkpoints (engine::Checkpointable; Poseidon arXiv'15 sec. 4.4): the stage's own state at an
/// iteration boundary, saved after and loaded after the model's and the optimizer's (the node's
/// Pipeline orders the sections so). Default: none (a BSP stage holds nothing at a boundary that
/// the replica and the optimizer do not: wire rounds restart from 0 on every node at once).
class SyncStage : public engine::Checkpointable {
 public:
  ~SyncStage() override = default;
  /// The strategy's name as in the job config (`sync.strategy`).
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Adds the stage's tasks for one iteration to `graph`, wired after `tasks.backward[l]` and
  /// before `tasks.done`. When a run of the graph ends, every replica holds the same updated
  /// parameters (BSP) — or, for asynchronous strategies, the locally applied ones.
  virtual void build(engine::Graph& graph, const IterationTasks& tasks) = 0;
  /// The per-layer plan (schemes, chunks, predicted traffic).
  [[nodiscard]] virtual std::vector<LayerPlan> plan() const = 0;
  /// Called once after the last iteration and its evaluation, before the transport shuts down:
  /// an asynchronous strategy completes its exchange here. Returns whether that changed this
  /// node's parameters (then the node evaluates the final replica too). May block (bounded).
  virtual bool finish() { return false; }
  /// Called on the node's thread between runs: paused = true before the node stops producing
  /// gradients for a while (the evaluation at the end of an epoch), false when it starts again.
  /// Lets a strategy keep such gaps out of what it measures (Ako's gamma and send rate). Default:
  /// nothing.
  virtual void pause(bool paused) { (void)paused; }
  /// Strategy-level figures for the start-up log and the metrics file ("sync": {...}), e.g. Ako's
  /// partition count and the inputs of its eq. 3. Default: none.
  [[nodiscard]] virtual std::map<std::string, double> summary() const { return {}; }
  /// Figures of the iterations since the last call, per layer, for the metrics' per-epoch record
  /// ("<figure>.<layer name>": a compressed layer's "compression_error" and "residual_ratio",
  /// docs/metrics.md); the node calls it at each epoch's end, between iterations. Default none.
  [[nodiscard]] virtual std::map<std::string, double> epoch_figures() { return {}; }
  /// Why this strategy cannot be checkpointed and resumed ("" when it can): the node refuses
  /// checkpoint.dir and --resume with this reason. Default: "".
  [[nodiscard]] virtual std::string checkpoint_refusal() const { return {}; }
  /// Called before load_state() when the checkpoint comes from a job of `old_nodes` nodes (a
  /// re-split, StrategyTraits::rolls_back). For StrategyTraits::resplit_by_replica, the section
  /// load_state() reads is old rank `rank`'s, or, when `copied`, another rank's (this rank is new
  /// to the job): state that belongs to one node alone (an error-feedback residual) must then not
  /// be taken twice. Default: nothing.
  virtual void prepare_resplit(std::size_t old_nodes, bool copied) {
    (void)old_nodes;
    (void)copied;
  }
  /// With SyncContext::rejoin, before the first iteration: takes this node's state from a live
  /// peer (its replica and what the strategy needs to go on) and returns the iteration to continue
  /// from (the pipeline's data cursor). Blocks until the peer answers (bounded). Default: throws
  /// ConfigError (the strategy cannot take a restarted node back). Throws PeerError if the peer
  /// fails or does not answer.
  virtual std::uint64_t join();
  /// Throws gradmesh::Error when this node may no longer act for the job: a stage that goes on
  /// without failed peers (Ako) lost its quorum (sync::Quorum), so this node is cut off and must
  /// write no checkpoint and no metrics. The node calls it before each checkpoint write and
  /// before its metrics. Any thread. Default: never throws (a BSP stage fails its iteration
  /// instead, and the node's recovery applies the rule).
  virtual void check_quorum() const {}
  void save_state(engine::StateWriter& out) override { (void)out; }
  void load_state(engine::StateReader& in) override { (void)in; }
  /// Messages received that broke the strategy's protocol (wrong size, unknown key, stale round);
  /// each was dropped and logged.
  [[nodiscard]] virtual std::uint64_t rejected_messages() const noexcept { return 0; }
  /// Whether the job ended for this node before its last iteration: the node stops training at
  /// the iteration boundary where it sees it, evaluates and calls finish(). Any thread. Default:
  /// never (local's quorum rounds end a straggler once a quorum of nodes has ended).
  [[nodiscard]] virtual bool ended() const { return false; }
};

/// Names of every strategy the registry knows, in the order `sync.strategy` documents them.
[[nodiscard]] std::vector<std::string> strategy_names();

/// What the rest of a node asks of a strategy, instead of comparing its name: kept in the registry
/// (sync/registry.cpp) beside its factory, so a new strategy touches the registry and its own
/// folder only (issue 27). Plain value type.
struct StrategyTraits {
  /// Bulk synchronous: every node applies the same update each iteration, so every node holds
  /// one model at each iteration boundary (a non-finite value stops all of them at the same
  /// iteration; job.on_nonfinite = "rollback"). (ps, poseidon, allreduce, auto.)
  bool bsp = false;
  /// Goes on without a failed peer by itself and takes a restarted one back while the job runs
  /// (`--rejoin` without checkpoints). (ako.)
  bool live_membership = false;
  /// The most nodes it trains (0: any). (none: 1.)
  std::size_t max_nodes = 0;
  /// The per-layer schemes (sync/scheme.h ids) the planner may choose from, in its tie order,
  /// for the strategies made of planned layers (PlanStage); empty for the others.
  std::vector<std::string> schemes;
  /// Compresses its own exchange of whole buffers with any registered compressor
  /// ([sync.compression] applies whatever `schemes` holds). (local: its outer exchange.)
  bool compresses_buffers = false;
  /// Its summary() predicts an iteration's seconds (PlanStage's predicted_iteration_seconds,
  /// local's round figures), which `gradmesh-node simulate` reads. (ps, poseidon, allreduce, auto,
  /// local; not ako, whose rate follows its partition count measured while it trains.)
  bool predicts_iteration = false;
  /// Its nodes step the job's optimizer on their gradients, so optimizer.algorithm may be any
  /// (sgd, adam, adamw). (All but ako, which sends and applies SGD's updates.)
  bool any_optimizer = true;
  /// Survives a failed peer by rolling back to checkpoint.dir in a smaller view, takes a
  /// restarted node back at a checkpoint boundary, and resumes a checkpoint on another node count
  /// (a re-split): apps/pipeline/recovery.cpp. (The BSP strategies, and local.)
  bool rolls_back = false;
  /// Each node's replica, optimizer state and stage state are its own between exchanges: a
  /// re-split gives the new job's rank r the sections of the old job's rank r (rank 0's for a rank
  /// the old job did not have; SyncStage::prepare_resplit()), instead of rank 0's one model with
  /// the velocities merged. (local.)
  bool resplit_by_replica = false;
};

/// The traits of strategy `name`. Throws ConfigError naming `sync.strategy`, the value and the
/// known names when `name` is unknown.
[[nodiscard]] const StrategyTraits& strategy_traits(std::string_view name);

/// Whether strategy `name` with [sync.*] `values` goes on by itself when a peer fails, without
/// checkpoints: StrategyTraits::live_membership (ako), or options that make it so (local with
/// sync.local.quorum). Throws as strategy_traits().
[[nodiscard]] bool goes_on_without_failed_peers(std::string_view name, const OptionValues& values);

/// The strategies with `trait` set, "a, b" (for messages such as "--rejoin needs ...").
[[nodiscard]] std::string strategies_with(bool StrategyTraits::*trait);

/// The strategy a plan of a job of `nodes` uses for `name`: `name`, or, when it trains fewer nodes
/// (none on several), the registry's default strategy (ps), as `gradmesh-node plan` shows it.
/// Throws as strategy_traits().
[[nodiscard]] std::string strategy_for_nodes(std::string_view name, std::size_t nodes);

/// What a strategy's own options need before any connection (job facts the registry passes on).
struct StartFacts {
  std::size_t nodes = 1;
  bool rejoin = false;  ///< this node rejoins a running job (--rejoin)
  bool probe = true;    ///< the start-up probe measures the links (planner.probe, not rejoining)
};

/// Checks, before any connection, what the registry knows of strategy `name` for a job: that the
/// name is known, the node count one it can train (none: 1), that sync.compression.method
/// compresses a scheme it plans (sync/compress/options.h: compression_fits), and its own options
/// (`options`; e.g. ako's automatic p needs a bandwidth when nothing will measure one). Throws
/// ConfigError naming the key, as make_sync_stage() would after the start-up probe: found there,
/// the first node to stop looks like a failed peer to the others.
void check_strategy(std::string_view name, const StartFacts& facts,
                    const SyncOptions& options = {});

/// Makes the strategy called `name` (the registry of STYLE.md practice 2). Throws ConfigError
/// naming `sync.strategy`, the value and the known names when `name` is unknown or not built yet.
/// A multi-node strategy made without a transport can plan() but not run.
[[nodiscard]] std::unique_ptr<SyncStage> make_sync_stage(std::string_view name,
                                                         SyncContext context);

}  // namespace gradmesh::sync

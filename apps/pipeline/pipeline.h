#pragma once
// A user's training pipeline on one gradmesh node (issue 12; DESIGN.md "Users' own pipelines"):
// the public API that gradmesh-node itself is built on.
//
//   int main(int argc, char** argv) {
//     gradmesh::tasks::register_layer("my_layer", make_my_layer);   // a layer kind of one's own
//     auto cli = gradmesh::app::parse_node_command_line(argc, argv, "my-trainer");
//     if (!cli.options) return cli.exit_status;                     // --help, or a bad flag
//     return gradmesh::app::run_main([&] {
//       gradmesh::app::Pipeline pipeline(*cli.options);             // config, peers, rank
//       pipeline.set_source(std::make_unique<MySource>(...));       // the data, and the model
//       pipeline.add_preprocess("augment", my_augmentation);        // batch -> batch, in place
//       pipeline.set_evaluation([&](gradmesh::tasks::Model& m) { return m.evaluate(test); });
//       pipeline.run();                                             // train, evaluate, metrics
//     });
//   }
//
// Run it on identical nodes like gradmesh-node (same flags: --config, --peers, --rank, --set,
// --metrics-out, --trace, --save-parameters, --resume), or with `gradmesh-launch --node
// ./my-trainer`.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/config/job_config.h"
#include "apps/node/metrics.h"
#include "apps/pipeline/data_source.h"
#include "apps/pipeline/iteration_graph.h"
#include "apps/pipeline/run_observer.h"
#include "apps/recovery/membership_view.h"
#include "tasks/model.h"

namespace gradmesh::app {

namespace detail {
struct NodeState;  // apps/pipeline/node_state.h (internal)
}  // namespace detail

/// What a node was given on its command line (gradmesh-node's flags; DESIGN.md "Contracts: CLI").
struct NodeOptions {
  std::filesystem::path config;        ///< --config JOB.toml (required)
  std::vector<std::string> overrides;  ///< --set KEY=VALUE, in order
  /// --peers HOST:PORT,...; with neither this nor --peers-file: SLURM's or torchrun's variables
  /// (topo/launch_environment.h), else one local node.
  std::string peers;
  std::filesystem::path peers_file;                  ///< --peers-file
  std::optional<long long> rank;                     ///< --rank; else from the environment
  std::optional<std::filesystem::path> metrics_out;  ///< --metrics-out DIR
  /// --resume DIR: continue from the newest checkpoint under DIR (DIR/node-<rank>/) that every
  /// node holds (README "Checkpoints and resume").
  std::optional<std::filesystem::path> resume;
  /// --rejoin: this node restarted after it failed and takes its place back in the running job
  /// (same --peers and --rank as before). Under ako, at once, from a live peer's state
  /// (sync::SyncStage::join(); no start-up probe, no checkpoints to resume). Under a BSP strategy
  /// with checkpoint.dir, through run_with_recovery(): at the next checkpoint boundary, from that
  /// checkpoint (README "When a peer fails").
  bool rejoin = false;
  bool save_parameters = false;  ///< --save-parameters: DIR/parameters-<rank>.f32
  bool trace = false;            ///< --trace: DIR/trace-<rank>.json (Chrome trace of every task)
  bool verbose = false;          ///< -v: debug logging, the effective config printed
  /// --progress: "auto" (a bar on a terminal, plain lines elsewhere), "bar", "line" or "none"
  /// (apps/pipeline/progress.h: progress_style()).
  std::string progress = "auto";
};

/// The result of parse_node_command_line: the options, or (options empty) the exit status the
/// program should return at once.
struct CommandLine {
  std::optional<NodeOptions> options;
  int exit_status = 0;  ///< 0 after --help or --version; 2 after a bad or missing flag
};

/// Parses a node's command line (the flags of NodeOptions; `program` names it in --help); help
/// and errors are printed (stdout, stderr). Reentrant.
[[nodiscard]] CommandLine parse_node_command_line(int argc, const char* const* argv,
                                                  std::string_view program);

/// Runs `body` and returns a process exit status as gradmesh-node does: 0 when it returns, 2 after
/// a gradmesh::ConfigError (logged as "configuration error: ..."), 1 after any other exception
/// (logged with its message: a peer's rank and address, a file's path, ...). Log lines carry the
/// rank from a launcher's variables (GRADMESH_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, RANK) until
/// the Pipeline resolves its own. On an error, under torchrun (TORCHELASTIC_ERROR_FILE set), the
/// message is also written to torchrun's error file in its JSON format.
[[nodiscard]] int run_main(const std::function<void()>& body);

/// Evaluates the model after each epoch: loss and accuracy on held-out data. Runs on the
/// pipeline's thread while no iteration runs (the model is in evaluation mode for the call).
using EvaluateFn = std::function<tasks::Model::Evaluation(tasks::Model& model)>;

/// One node's training job: its config, peers and rank, its model, the iteration graph (data
/// source, pre-processing, forward, loss, backward, and the configured sync stage after each
/// layer's backward task: WFBP), the network, the epochs with their evaluations, and the metrics
/// and trace gradmesh-node writes.
///
/// Order of calls: construct; set_source (required; builds the model); then, in any order,
/// add_preprocess and set_evaluation; optionally build() and add tasks of one's own to graph();
/// run() once. Every node of a job must make the same calls with the same config.
///
/// Thread safety: none; drive a Pipeline from one thread. Errors: gradmesh::ConfigError for a bad
/// config or flag (naming the key), gradmesh::PeerError for an unreachable or failing peer (its
/// rank and address), gradmesh::ContractError for calls out of order.
class Pipeline {
 public:
  /// Loads the job config (options.config, then options.overrides), resolves the peer list
  /// (--peers, --peers-file, SLURM's or torchrun's variables, else one local node) and this
  /// node's rank, and sets up logging.
  /// Opens no socket yet. Throws ConfigError naming the key, flag or variable at fault.
  /// `membership`: the view this Pipeline runs in (run_with_recovery() sets it; a user's program
  /// leaves the default).
  explicit Pipeline(NodeOptions options, MembershipView membership = {});
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline();

  [[nodiscard]] const JobConfig& config() const noexcept;
  [[nodiscard]] const NodeOptions& options() const noexcept;
  [[nodiscard]] const MembershipView& membership() const noexcept;
  /// This node's rank in [0, nodes()).
  [[nodiscard]] std::size_t rank() const noexcept;
  /// n, the number of nodes in the peer list.
  [[nodiscard]] std::size_t nodes() const noexcept;
  /// Whether this view started: its transport connected every peer (always false for one node).
  [[nodiscard]] bool connected() const noexcept;
  /// What this view's transport and sync stage refused so far (zeros before they exist); any
  /// time, after a failed run() too. Thread safety: the transport's counters().
  [[nodiscard]] FaultCounters fault_counters() const;
  /// Iterations done, over the job (a resumed run's included; 0 before build()).
  [[nodiscard]] std::uint64_t iterations_done() const noexcept;
  /// Every node's "host:port", in rank order.
  [[nodiscard]] std::vector<std::string> peer_addresses() const;
  /// K, samples per node per iteration (optimizer.batch_size).
  [[nodiscard]] std::size_t batch_size() const noexcept;

  /// The data source (required, once) and, from its sample shape, the model of `model.layers`
  /// on `compute.device` (a user's layer kinds must be registered before: tasks::register_layer).
  /// Throws ConfigError for a bad layer list (naming model.layers[i]), ContractError if called
  /// twice or after build().
  void set_source(std::unique_ptr<DataSource> source);
  /// The same with the model given in C++ instead of by model.layers (issue 29: "models built in
  /// C++ through the API"): a stack or a graph of LayerSpecs (tasks/layers/layer_spec.h; a
  /// graph's entries carry their name and inputs), ending in softmax_cross_entropy. The specs
  /// replace model.layers in this node's config, in canonical text (to_string), so the config
  /// hash the nodes compare at the handshake and config() show the model that runs: every node
  /// must build the same one (the start-up line's hash and --verbose's effective config, printed
  /// at construction, are the file's). Throws ConfigError naming
  /// model.layers[i] for a bad list or graph, ContractError as set_source.
  void set_source(std::unique_ptr<DataSource> source, const std::vector<tasks::LayerSpec>& layers);
  /// Appends a pre-processing task (after the source and the earlier ones, before forward_0).
  /// Throws ContractError after build().
  void add_preprocess(std::string name, PreprocessFn fn);
  /// The evaluation after each epoch (and after an asynchronous strategy's final exchange), a
  /// function of the program's own that each node runs on its whole replica. None set (and no
  /// test set): no evaluation, and the metrics' accuracies stay 0. Replaces set_test_set().
  void set_evaluation(EvaluateFn evaluate);
  /// The built-in evaluation, Model::evaluate on `test` (which must outlive run()), split across
  /// the nodes where their replicas are one model: under a BSP strategy each of the n nodes
  /// scores its share (examples [r N / n, (r + 1) N / n) of the N), the shares' figures are
  /// all-gathered (sync::ResumeAgreement::exchange_evaluation) and summed in rank order, so every
  /// node reports the whole set's accuracy (the same value, bit for bit, as one node scoring it
  /// all; the loss up to rounding) for 1/n of the work. Under ako, whose replicas differ, every
  /// node scores the whole set. A model with batch normalization evaluates each share with its
  /// node's own running statistics (they are per node, as DDP's). Replaces set_evaluation().
  void set_test_set(const tasks::Dataset& test);

  /// The model (after set_source; ContractError before). Its parameters() are this node's replica.
  [[nodiscard]] tasks::Model& model();

  /// Connects to the peers (bounded by net.connect_timeout), measures the links and the layers
  /// (planner.probe), makes the sync stage (sync.strategy) and builds the iteration graph. After
  /// it, graph() may take tasks of one's own (before run()). run() calls it if not called yet.
  /// Throws ConfigError, PeerError; ContractError without a source.
  void build();
  /// Adds state of one's own (a stateful task's, a pre-processing task's random stream) to the
  /// node's checkpoints as section `name` (checkpoint.dir; loaded by --resume before the first
  /// iteration, after the model, optimizer, data cursor and sync stage). `state` must outlive
  /// run(). Every node must add the same names. Throws ContractError after run() began or for a
  /// name taken ("model", "optimizer", "cursor", "sync" are the pipeline's own).
  void add_checkpoint_state(std::string name, engine::Checkpointable& state);
  /// Adds an observer told of the run's start, progress and each epoch's end (after the
  /// console's and the metrics'; apps/pipeline/run_observer.h). It must outlive run(). Throws
  /// ContractError after run() began.
  void add_observer(RunObserver& observer);

  /// The iteration graph and its tasks (after build(); ContractError before).
  [[nodiscard]] engine::Graph& graph();
  [[nodiscard]] const PipelineTasks& tasks() const;

  /// Trains for job.epochs epochs (at most job.max_iterations iterations), evaluating after each
  /// epoch, prints one progress line per epoch, completes the strategy's exchange, shuts the
  /// network down, and writes metrics (and trace, parameters) to --metrics-out as gradmesh-node.
  /// With checkpoint.dir, writes a checkpoint every checkpoint.every iterations (or at the end of
  /// every epoch) and after the last iteration; with --resume, first loads the checkpoint the
  /// nodes agreed on in build() and continues from its iteration (job.epochs and
  /// job.max_iterations count from the job's start, not from the resume). Poseidon arXiv'15
  /// sec. 4.4; README "Checkpoints and resume". Errors also: CheckpointError naming the path.
  /// Returns the metrics. Call once. Errors: what build() throws, a task's error (a PeerError
  /// names the peer; the other nodes are told why this node stops).
  NodeMetrics run();

 private:
  std::unique_ptr<detail::NodeState> state_;
};

/// Runs a node's job as gradmesh-node does: a Pipeline of `options`, `configure` (set_source,
/// set_evaluation, ...), build(), run(). Under a BSP strategy (ps, poseidon, allreduce, auto)
/// with checkpoint.dir set, a peer that fails during training does not end the job: the nodes
/// that are left agree on who is gone (the first PeerError's root rank: a peer that stops for
/// another's failure names it, net::Transport::abort_for), drop it from the peer list (ranks
/// after it move down by one), and start again on their own addresses with --resume from the
/// newest checkpoint (re-split over n - 1 nodes: "On another node count" in the README); later
/// checkpoints go to checkpoint.dir/view-<k>. A node whose view differs is refused by the
/// others' handshake (the peer list is part of it). Each rollback is logged with the rank and
/// address of the peer that is gone and counted ("rollbacks" in the metrics). Restarted nodes
/// come back too: at every checkpoint boundary the nodes take in the join requests filed under
/// checkpoint.dir (options.rejoin on the restarted node: it files one and waits, at most an hour,
/// for a view that admits it), stop at that checkpoint and start again with the joiners after
/// the old ranks (apps/recovery/join_request.h; "rejoins_admitted" and "rejoined" in the
/// metrics). Anything else (another strategy, no checkpoint.dir, no checkpoint written yet, a
/// failure during the first view's start-up) throws as Pipeline::run() does; --rejoin under a
/// BSP strategy without checkpoint.dir throws ConfigError, and a refused or never admitted
/// joiner gradmesh::Error.
void run_with_recovery(NodeOptions options, const std::function<void(Pipeline&)>& configure);

}  // namespace gradmesh::app

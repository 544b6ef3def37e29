#include "apps/pipeline/pipeline.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "apps/pipeline/iteration_graph.h"
#include "apps/pipeline/job_options.h"
#include "apps/pipeline/node_builder.h"
#include "apps/pipeline/node_state.h"
#include "apps/pipeline/progress.h"
#include "apps/pipeline/run_report.h"
#include "apps/pipeline/start_up.h"
#include "apps/pipeline/training_loop.h"
#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/make_backend.h"
#include "topo/launch_environment.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

namespace {

/// The program's use of the Pipeline API: a call out of order or twice is refused before any work,
/// naming the call and what to do, without a source path (it is not gradmesh's bug).
void require(bool ok, const std::string& what) {
  if (!ok) throw ContractError("Pipeline: " + what);
}

}  // namespace

Pipeline::Pipeline(NodeOptions options, MembershipView membership) {
  JobConfig config = load_job_config(options.config, options.overrides);
  // Without --peers / --peers-file, SLURM's or torchrun's variables may give peers and rank.
  auto launched =
      options.peers.empty() && options.peers_file.empty()
          ? topo::launch_environment(topo::process_environment(), config.net.port, options.rank)
          : std::nullopt;
  topo::PeerList peers = launched ? launched->peers : peer_list(options);
  state_ = std::make_unique<detail::NodeState>(std::move(options), std::move(membership),
                                               std::move(config), std::move(peers));
  detail::NodeState& s = *state_;
  const std::size_t nodes = s.job.nodes();
  const topo::RankChoice choice =
      launched ? launched->rank
      : nodes == 1 && !s.job.options.rank
          ? topo::RankChoice{0, "single node"}
          : topo::resolve_rank(s.job.options.rank, topo::process_environment(), nodes);
  s.job.rank = choice.rank;
  s.job.rank_source = choice.source;
  spdlog::set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(s.job.rank) + "] [%^%l%$] %v");
  const bool terminal = ::isatty(::fileno(stdout)) == 1;
  apply_colour_policy(colour_allowed(terminal, topo::process_environment()));
  s.job.progress_style =
      progress_style(s.job.options.progress, terminal, topo::process_environment());
  if (s.job.options.verbose) spdlog::set_level(spdlog::level::debug);
  if (s.job.options.trace && !s.job.options.metrics_out) {
    throw ConfigError("--trace needs --metrics-out DIR");
  }
  if (s.job.options.save_parameters && !s.job.options.metrics_out) {
    throw ConfigError("--save-parameters needs --metrics-out DIR");
  }
  if (s.job.config.net.min_nodes && *s.job.config.net.min_nodes > nodes) {
    throw ConfigError("net.min_nodes = " + std::to_string(*s.job.config.net.min_nodes) +
                      " is more than the job's " + std::to_string(nodes) +
                      " node(s): the job could not go on after any failure, nor start");
  }
  if (s.job.config.job.on_nonfinite == "rollback" &&
      (s.job.config.checkpoint.dir.empty() ||
       !sync::strategy_traits(s.job.config.sync.strategy).bsp)) {
    throw ConfigError("job.on_nonfinite = \"rollback\" needs checkpoint.dir and a BSP strategy (" +
                      sync::strategies_with(&sync::StrategyTraits::bsp) +
                      "): the job goes back to its newest checkpoint; sync.strategy = \"" +
                      s.job.config.sync.strategy + "\", checkpoint.dir = \"" +
                      s.job.config.checkpoint.dir + "\"");
  }
  // Folders written only after training (metrics) or after an epoch (checkpoints) fail now.
  if (s.job.options.metrics_out)
    check_writable_folder(*s.job.options.metrics_out, "--metrics-out", s.job.rank);
  if (!s.job.config.checkpoint.dir.empty())
    check_writable_folder(s.job.config.checkpoint.dir, "checkpoint.dir", s.job.rank);
  // The same text on every node (the rank is the line's prefix), so gradmesh-launch prints it once.
  spdlog::info("job '{}': strategy {}, {} node(s), rank from {}, config hash {:016x}",
               s.job.config.job.name, s.job.config.sync.strategy, nodes, s.job.rank_source,
               s.job.config.hash());
  if (launched) spdlog::info("peers from {}", launched->source);
  if (s.job.options.verbose) spdlog::debug("effective config:\n{}", s.job.config.canonical_text());
}

Pipeline::~Pipeline() = default;

const JobConfig& Pipeline::config() const noexcept { return state_->job.config; }
const NodeOptions& Pipeline::options() const noexcept { return state_->job.options; }
const MembershipView& Pipeline::membership() const noexcept { return state_->job.membership; }

void Pipeline::add_observer(RunObserver& observer) {
  require(!state_->plan.ran, "add_observer() after run() began: add observers before run()");
  state_->program.observers.push_back(&observer);
}

std::vector<std::string> Pipeline::peer_addresses() const { return state_->job.addresses(); }
std::size_t Pipeline::rank() const noexcept { return state_->job.rank; }
std::size_t Pipeline::nodes() const noexcept { return state_->job.nodes(); }
bool Pipeline::connected() const noexcept { return state_->runtime.connected; }

FaultCounters Pipeline::fault_counters() const {
  return view_fault_counters(state_->runtime.transport.get(), state_->plan.stage.get());
}

std::uint64_t Pipeline::iterations_done() const noexcept {
  return state_->plan.graph ? state_->plan.graph->iterations() : 0;
}
std::size_t Pipeline::batch_size() const noexcept {
  return state_->job.config.optimizer.batch_size;
}

void Pipeline::set_source(std::unique_ptr<DataSource> source) {
  detail::NodeState& s = *state_;
  require(source != nullptr, "set_source(nullptr): pass the DataSource that fills the batches");
  require(!s.program.source, "set_source() called twice: a Pipeline has one data source");
  const auto specs = layer_specs(s.job.config);
  const tasks::Shape shape = source->sample_shape();
  // Before the model: its layers size their per-thread scratch by the threads (Conv2d's chunks).
  tasks::cpu::set_kernels(cpu_kernels(s.job.config));
  tasks::cpu::set_threads(compute_threads(s.job.config, s.job.peers, s.job.rank));
  try {
    s.replica.model.emplace(specs, shape, batch_size(), s.job.config.job.seed,
                            tasks::make_backend(s.job.config.compute.device));
  } catch (const ConfigError& e) {
    // The layers' shapes follow from the source's sample shape: name it, the usual culprit of a
    // program's own source (a flat vector where convolutions want an image).
    throw ConfigError(std::string(e.what()) + " [the model's input is the data source's " +
                      source_name(*source) + "::sample_shape(), " + tasks::to_string(shape) +
                      (shape.is_flat() && shape.channels > 1
                           ? ": a flat vector of " + std::to_string(shape.size()) +
                                 " floats; convolutions and pooling want C x H x W, e.g. {3, 32, "
                                 "32}]"
                           : "]"));
  }
  spdlog::info("compute device: {}", s.replica.model->backend().description());
  spdlog::info("compute threads: {} (GEMM and the CPU kernels; compute.threads)",
               tasks::cpu::threads());
  if (s.replica.model->backend().host_addressable() &&
      tasks::cpu::kernels() == tasks::cpu::CpuKernels::kBuiltin) {
    if (const std::string w = tasks::cpu::openblas_core_warning(); !w.empty()) spdlog::warn(w);
  }
  check_optimizer_keys(s.job.config);
  s.replica.optimizer.emplace(sgd_options(s.job.config), s.replica.model->parameter_count(),
                              adam_options(s.job.config));
  if (s.job.config.optimizer.weight_decay_exclude) {
    s.replica.optimizer->exempt_from_weight_decay(s.replica.model->weight_decay_exempt());
  }
  s.replica.optimizer->set_non_finite_check(s.job.config.job.on_nonfinite != "off");
  s.program.source = std::move(source);
}

void Pipeline::set_source(std::unique_ptr<DataSource> source,
                          const std::vector<tasks::LayerSpec>& layers) {
  require(!state_->program.source, "set_source() called twice: a Pipeline has one data source");
  std::vector<std::string> texts;
  texts.reserve(layers.size());
  for (const tasks::LayerSpec& spec : layers) texts.push_back(tasks::to_string(spec));
  try {
    (void)tasks::parse_layer_specs(texts);  // the list's rules, as for model.layers
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  state_->job.config.model.layers = std::move(texts);
  set_source(std::move(source));
}

void Pipeline::add_preprocess(std::string name, PreprocessFn fn) {
  require(!state_->plan.graph, "add_preprocess() after build() or run(): add preprocessing first");
  require(static_cast<bool>(fn), "add_preprocess() with an empty function");
  state_->program.preprocess.push_back(PreprocessTask{std::move(name), std::move(fn)});
}

void Pipeline::set_evaluation(EvaluateFn evaluate) {
  state_->program.evaluate = std::move(evaluate);
  state_->program.test_set = nullptr;
}

void Pipeline::set_test_set(const tasks::Dataset& test) {
  state_->program.test_set = &test;
  state_->program.evaluate = nullptr;
}

tasks::Model& Pipeline::model() {
  require(state_->replica.model.has_value(),
          "model() before set_source(): the model is built when the data source gives its sample "
          "shape");
  return *state_->replica.model;
}

void Pipeline::build() { detail::NodeBuilder(*state_).build(); }

engine::Graph& Pipeline::graph() {
  require(state_->plan.graph.has_value(), "graph() before build()");
  return state_->plan.graph->graph();
}

const PipelineTasks& Pipeline::tasks() const {
  require(state_->plan.graph.has_value(), "tasks() before build()");
  return state_->plan.graph->tasks();
}

NodeMetrics Pipeline::run() {
  require(
      !state_->plan.ran,
      "run() called twice: a Pipeline runs one job; construct another Pipeline for another job");
  state_->plan.ran = true;
  if (!state_->plan.graph) build();
  detail::NodeState& s = *state_;
  return detail::TrainingLoop(s.job, s.program, s.replica, s.runtime, s.plan, s.recovery).run();
}

void Pipeline::add_checkpoint_state(std::string name, engine::Checkpointable& state) {
  require(!state_->plan.ran, "add_checkpoint_state() after run() began: add states before run()");
  for (const char* own : {"model", "optimizer", "cursor", "sync"}) {
    require(name != own, "add_checkpoint_state(\"" + name +
                             "\"): that name is one of the pipeline's own sections");
  }
  state_->program.own_states.emplace_back(std::move(name), &state);
}

}  // namespace gradmesh::app

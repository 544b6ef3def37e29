#include "apps/pipeline/pipeline.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "apps/pipeline/job_options.h"
#include "apps/pipeline/node_builder.h"
#include "apps/pipeline/node_state.h"
#include "apps/pipeline/progress.h"
#include "apps/pipeline/start_up.h"
#include "apps/pipeline/training_loop.h"
#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/make_backend.h"
#include "topo/launch_environment.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

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
  const std::size_t nodes = s.nodes();
  const topo::RankChoice choice =
      launched ? launched->rank
      : nodes == 1 && !s.options.rank
          ? topo::RankChoice{0, "single node"}
          : topo::resolve_rank(s.options.rank, topo::process_environment(), nodes);
  s.rank = choice.rank;
  s.rank_source = choice.source;
  spdlog::set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(s.rank) + "] [%^%l%$] %v");
  const bool terminal = ::isatty(::fileno(stdout)) == 1;
  apply_colour_policy(colour_allowed(terminal, topo::process_environment()));
  s.progress_style = progress_style(s.options.progress, terminal, topo::process_environment());
  if (s.options.verbose) spdlog::set_level(spdlog::level::debug);
  if (s.options.trace && !s.options.metrics_out) {
    throw ConfigError("--trace needs --metrics-out DIR");
  }
  if (s.options.save_parameters && !s.options.metrics_out) {
    throw ConfigError("--save-parameters needs --metrics-out DIR");
  }
  if (s.config.net.min_nodes && *s.config.net.min_nodes > nodes) {
    throw ConfigError("net.min_nodes = " + std::to_string(*s.config.net.min_nodes) +
                      " is more than the job's " + std::to_string(nodes) +
                      " node(s): the job could not go on after any failure, nor start");
  }
  // Folders written only after training (metrics) or after an epoch (checkpoints) fail now.
  if (s.options.metrics_out) check_writable_folder(*s.options.metrics_out, "--metrics-out", s.rank);
  if (!s.config.checkpoint.dir.empty())
    check_writable_folder(s.config.checkpoint.dir, "checkpoint.dir", s.rank);
  // The same text on every node (the rank is the line's prefix), so gradmesh-launch prints it once.
  spdlog::info("job '{}': strategy {}, {} node(s), rank from {}, config hash {:016x}",
               s.config.job.name, s.config.sync.strategy, nodes, s.rank_source, s.config.hash());
  if (launched) spdlog::info("peers from {}", launched->source);
  if (s.options.verbose) spdlog::debug("effective config:\n{}", s.config.canonical_text());
}

Pipeline::~Pipeline() = default;

const JobConfig& Pipeline::config() const noexcept { return state_->config; }
const NodeOptions& Pipeline::options() const noexcept { return state_->options; }
const MembershipView& Pipeline::membership() const noexcept { return state_->membership; }

void Pipeline::add_observer(RunObserver& observer) {
  GRADMESH_CHECK(!state_->ran, "Pipeline::add_observer after run() began");
  state_->observers.push_back(&observer);
}

std::vector<std::string> Pipeline::peer_addresses() const { return state_->addresses(); }
std::size_t Pipeline::rank() const noexcept { return state_->rank; }
std::size_t Pipeline::nodes() const noexcept { return state_->nodes(); }
bool Pipeline::connected() const noexcept { return state_->connected; }
std::size_t Pipeline::batch_size() const noexcept { return state_->config.optimizer.batch_size; }

void Pipeline::set_source(std::unique_ptr<DataSource> source) {
  detail::NodeState& s = *state_;
  GRADMESH_CHECK(source != nullptr, "Pipeline::set_source: no source");
  GRADMESH_CHECK(!s.source, "Pipeline::set_source: the source is set already");
  const auto specs = layer_specs(s.config);
  s.model.emplace(specs, source->sample_shape(), batch_size(), s.config.job.seed,
                  tasks::make_backend(s.config.compute.device));
  spdlog::info("compute device: {}", s.model->backend().description());
  tasks::cpu::set_blas_threads(blas_threads(s.config, s.peers, s.rank));
  check_optimizer_keys(s.config);
  s.optimizer.emplace(sgd_options(s.config), s.model->parameter_count(), adam_options(s.config));
  if (s.config.optimizer.weight_decay_exclude) {
    s.optimizer->exempt_from_weight_decay(s.model->weight_decay_exempt());
  }
  s.source = std::move(source);
}

void Pipeline::set_source(std::unique_ptr<DataSource> source,
                          const std::vector<tasks::LayerSpec>& layers) {
  GRADMESH_CHECK(!state_->source, "Pipeline::set_source: the source is set already");
  std::vector<std::string> texts;
  texts.reserve(layers.size());
  for (const tasks::LayerSpec& spec : layers) texts.push_back(tasks::to_string(spec));
  try {
    (void)tasks::parse_layer_specs(texts);  // the list's rules, as for model.layers
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  state_->config.model.layers = std::move(texts);
  set_source(std::move(source));
}

void Pipeline::add_preprocess(std::string name, PreprocessFn fn) {
  GRADMESH_CHECK(!state_->graph, "Pipeline::add_preprocess after build()");
  GRADMESH_CHECK(static_cast<bool>(fn), "Pipeline::add_preprocess: empty function");
  state_->preprocess.push_back(PreprocessTask{std::move(name), std::move(fn)});
}

void Pipeline::set_evaluation(EvaluateFn evaluate) { state_->evaluate = std::move(evaluate); }

tasks::Model& Pipeline::model() {
  GRADMESH_CHECK(state_->model.has_value(), "Pipeline::model before set_source");
  return *state_->model;
}

void Pipeline::build() { detail::NodeBuilder(*state_).build(); }

engine::Graph& Pipeline::graph() {
  GRADMESH_CHECK(state_->graph.has_value(), "Pipeline::graph before build()");
  return state_->graph->graph();
}

const PipelineTasks& Pipeline::tasks() const {
  GRADMESH_CHECK(state_->graph.has_value(), "Pipeline::tasks before build()");
  return state_->graph->tasks();
}

NodeMetrics Pipeline::run() {
  GRADMESH_CHECK(!state_->ran, "Pipeline::run called twice");
  state_->ran = true;
  if (!state_->graph) build();
  return detail::TrainingLoop(*state_, state_->observers).run();
}

void Pipeline::add_checkpoint_state(std::string name, engine::Checkpointable& state) {
  GRADMESH_CHECK(!state_->ran, "Pipeline::add_checkpoint_state after run()");
  for (const char* own : {"model", "optimizer", "cursor", "sync"}) {
    GRADMESH_CHECK(name != own, "Pipeline::add_checkpoint_state: '" + name +
                                    "' is one of the pipeline's own sections");
  }
  state_->own_states.emplace_back(std::move(name), &state);
}

}  // namespace gradmesh::app

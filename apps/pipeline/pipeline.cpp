#include "apps/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "apps/config/rate.h"
#include "apps/pipeline/job_options.h"
#include "apps/pipeline/job_secret.h"
#include "apps/pipeline/progress.h"
#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "engine/trace_recorder.h"
#include "net/tcp/tcp_transport.h"
#include "sync/channel.h"
#include "sync/probe/link_probe.h"
#include "sync/resume/resume_agreement.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/make_backend.h"
#include "tasks/optim/optimizer.h"
#include "tasks/profile.h"
#include "topo/cost_model.h"
#include "topo/launch_environment.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

namespace {

using Clock = std::chrono::steady_clock;

topo::PeerList peer_list(const NodeOptions& options) {
  if (!options.peers.empty() && !options.peers_file.empty()) {
    throw ConfigError("give either --peers or --peers-file, not both");
  }
  if (!options.peers.empty()) return topo::PeerList::parse(options.peers);
  if (!options.peers_file.empty()) return topo::PeerList::from_file(options.peers_file);
  return topo::PeerList({topo::Peer{"127.0.0.1", 1}});  // a single local node: no socket is opened
}

/// BLAS threads for this node: compute.threads, else this machine's cores shared by its nodes.
int blas_threads(const JobConfig& config, const topo::PeerList& peers, std::size_t rank) {
  if (config.compute.threads > 0) return static_cast<int>(config.compute.threads);
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t local = std::max<std::size_t>(1, peers.count_on_host(peers[rank].host));
  return static_cast<int>(std::max<std::size_t>(1, cores / local));
}

/// The planner's start-up measurements (DESIGN.md "Measure, don't guess"): this node's links
/// (alpha, B to every peer), its per-layer forward / backward times and GEMM rate, exchanged so that
/// every node plans from the same figures (the slowest link, the slowest node's layer times).
sync::JobMeasurements measure_job(sync::LinkProbe& probe, tasks::Model& model, std::size_t batch,
                                  std::uint64_t seed, std::size_t nodes) {
  const auto start = Clock::now();
  sync::NodeProfile local = probe.measure_links();
  // Every node profiles its compute at the same time, as they compute while training (nodes on
  // one host share its cores), and none while another still moves the link probe's bytes, which
  // on loopback takes CPU from the profile: measured apart, the GEMM rate of a 4-node job on 2
  // cores read 11 GFLOP/s in one run and 32 in the next, and the plan followed the noise.
  if (nodes > 1) probe.barrier(0);
  const tasks::ComputeProfile compute = tasks::profile_compute(model, batch, nodes, seed);
  local.forward_seconds = compute.times.forward_seconds;
  local.backward_seconds = compute.times.backward_seconds;
  local.backward_input_seconds = compute.times.backward_input_seconds;
  local.gemm_flops = compute.gemm_flops;
  local.step_seconds_per_float = compute.step_seconds_per_float;
  const auto profiles = nodes > 1 ? probe.exchange(local) : std::vector<sync::NodeProfile>{local};
  sync::JobMeasurements m = sync::combine(profiles);
  const topo::LinkCost link = topo::slowest_link(m.links);
  double tf = 0, tb = 0;
  for (double t : m.forward_seconds) tf += t;
  for (double t : m.backward_seconds) tb += t;
  spdlog::info("measured in {:.2f} s: slowest link alpha {:.1f} us, B {}, o {:.1f} us; "
               "GEMM {:.1f} GFLOP/s; step {:.2f} ns/float; t_f {:.2f} ms, t_b {:.2f} ms "
               "(slowest node)",
               std::chrono::duration<double>(Clock::now() - start).count(), link.alpha * 1e6,
               nodes > 1 ? format_rate(link.bandwidth) : std::string("-"),
               link.message_seconds * 1e6, m.gemm_flops / 1e9, m.step_seconds_per_float * 1e9,
               tf * 1e3, tb * 1e3);
  return m;
}

void log_summary(const sync::SyncStage& stage) {
  const auto summary = stage.summary();
  const auto find = [&](const char* key) {
    const auto it = summary.find(key);
    return it == summary.end() ? -1.0 : it->second;
  };
  if (find("predicted_iteration_seconds") >= 0) {
    spdlog::info("plan: {:.0f} bytes sent per iteration, {:.2f} ms per iteration predicted, {:.0f} "
                 "all-reduce bucket(s)",
                 find("predicted_bytes_sent"), find("predicted_iteration_seconds") * 1e3,
                 find("buckets"));
  }
}

void save_parameters(const std::filesystem::path& dir, std::size_t rank,
                     std::span<const float> parameters) {
  std::filesystem::create_directories(dir);
  const auto path = dir / ("parameters-" + std::to_string(rank) + ".f32");
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(parameters.data()),
            static_cast<std::streamsize>(parameters.size_bytes()));
  if (!out) throw Error("cannot write " + path.string());
}

/// The keys whose values differ between two training_text()s ("key = value" lines), for the
/// error of a --resume under another config.
std::string config_difference(const std::string& saved, const std::string& current) {
  const auto parse = [](const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const std::size_t eq = line.find(" = ");
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
    }
    return out;
  };
  const auto a = parse(saved), b = parse(current);
  std::string out;
  const auto add = [&out](const std::string& key, const std::string& then, const std::string& now) {
    out += (out.empty() ? "" : "; ") + key + " = " + then + " in the checkpoint, " + now + " now";
  };
  for (const auto& [key, value] : a) {
    const auto it = b.find(key);
    if (it == b.end()) add(key, value, "no such key");
    else if (it->second != value) add(key, value, it->second);
  }
  for (const auto& [key, value] : b) {
    if (!a.contains(key)) add(key, "no such key", value);
  }
  return out.empty() ? "(the same keys and values: written by another gradmesh version?)" : out;
}

}  // namespace

/// Everything a node holds for its job. Members are declared in the order they are needed, so
/// that they are destroyed in reverse: the graph and stage before the channel and transport.
struct Pipeline::State {
  NodeOptions options;
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
  std::optional<sync::Channel> channel;
  std::optional<sync::LinkProbe> probe;
  std::optional<sync::ResumeAgreement> agreement;
  std::unique_ptr<sync::SyncStage> stage;
  std::optional<IterationGraph> graph;
  bool ran = false;

  // Checkpoints (checkpoint.dir) and --resume: README "Checkpoints and resume".
  std::vector<std::pair<std::string, engine::Checkpointable*>> own_states;  // add_checkpoint_state
  engine::CheckpointSet checkpoints;             // the pipeline's sections, then own_states
  std::optional<engine::CheckpointStore> store;  // checkpoint.dir set
  engine::CheckpointHeader checkpoint_header;    // iteration filled at each save
  std::vector<std::byte> checkpoint_file;        // reused by every save
  // The file write under way (its seconds), at most one; declared after what it uses, so that
  // its destructor (which waits for the write) runs first.
  std::future<double> checkpoint_write;
  std::uint64_t checkpoint_writing = 0;          // the iteration being written
  std::optional<engine::Checkpoint> resume_from;  // agreed in build(), loaded in run()
  std::string resume_source;                      // its path

  State(NodeOptions o, JobConfig c, topo::PeerList p)
      : options(std::move(o)), config(std::move(c)), peers(std::move(p)) {}

  /// On every exit path, before the stage, the probe or the channel is destroyed: stop the
  /// transport's loop thread (no more handler calls into them; later sends throw instead of
  /// touching freed memory), then let queued network jobs (which refer to them) drain.
  ~State() {
    if (transport) transport->close();
    executor.wait_idle();
  }

  [[nodiscard]] std::size_t nodes() const noexcept { return peers.size(); }
};

Pipeline::Pipeline(NodeOptions options) {
  JobConfig config = load_job_config(options.config, options.overrides);
  // Without --peers / --peers-file, SLURM's or torchrun's variables may give peers and rank.
  auto launched = options.peers.empty() && options.peers_file.empty()
                      ? topo::launch_environment(topo::process_environment(), config.net.port,
                                                 options.rank)
                      : std::nullopt;
  topo::PeerList peers = launched ? launched->peers : peer_list(options);
  state_ = std::make_unique<State>(std::move(options), std::move(config), std::move(peers));
  State& s = *state_;
  const std::size_t nodes = s.nodes();
  const topo::RankChoice choice =
      launched                        ? launched->rank
      : nodes == 1 && !s.options.rank ? topo::RankChoice{0, "single node"}
                                      : topo::resolve_rank(s.options.rank,
                                                           topo::process_environment(), nodes);
  s.rank = choice.rank;
  s.rank_source = choice.source;
  spdlog::set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(s.rank) + "] [%^%l%$] %v");
  if (s.options.verbose) spdlog::set_level(spdlog::level::debug);
  if (s.options.trace && !s.options.metrics_out) {
    throw ConfigError("--trace needs --metrics-out DIR");
  }
  if (s.options.save_parameters && !s.options.metrics_out) {
    throw ConfigError("--save-parameters needs --metrics-out DIR");
  }
  spdlog::info("job '{}': strategy {}, {} node(s), rank {} (from {}), config hash {:016x}",
               s.config.job.name, s.config.sync.strategy, nodes, s.rank, s.rank_source,
               s.config.hash());
  if (launched) spdlog::info("peers from {}", launched->source);
  if (s.options.verbose) spdlog::debug("effective config:\n{}", s.config.canonical_text());
}

Pipeline::~Pipeline() = default;

const JobConfig& Pipeline::config() const noexcept { return state_->config; }
const NodeOptions& Pipeline::options() const noexcept { return state_->options; }
std::size_t Pipeline::rank() const noexcept { return state_->rank; }
std::size_t Pipeline::nodes() const noexcept { return state_->nodes(); }
std::size_t Pipeline::batch_size() const noexcept { return state_->config.optimizer.batch_size; }

void Pipeline::set_source(std::unique_ptr<DataSource> source) {
  State& s = *state_;
  GRADMESH_CHECK(source != nullptr, "Pipeline::set_source: no source");
  GRADMESH_CHECK(!s.source, "Pipeline::set_source: the source is set already");
  const auto specs = layer_specs(s.config);
  s.model.emplace(specs, source->sample_shape(), batch_size(), s.config.job.seed,
                  tasks::make_backend(s.config.compute.device));
  spdlog::info("compute device: {}", s.model->backend().description());
  tasks::cpu::set_blas_threads(blas_threads(s.config, s.peers, s.rank));
  s.optimizer.emplace(sgd_options(s.config), s.model->parameter_count());
  s.source = std::move(source);
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

void Pipeline::build() {
  State& s = *state_;
  GRADMESH_CHECK(s.source != nullptr, "Pipeline::build before set_source");
  GRADMESH_CHECK(!s.graph, "Pipeline::build called twice");
  const JobConfig& config = s.config;
  const std::size_t nodes = s.nodes();
  const std::size_t batch = batch_size();
  tasks::Model& model = *s.model;

  if (s.options.trace) {
    s.trace = std::make_shared<engine::TraceRecorder>();
    s.executor.add_observer(s.trace);
  }
  if (nodes > 1) {
    net::TransportOptions t;
    t.rank = s.rank;
    for (const topo::Peer& p : s.peers.peers()) t.peers.push_back(net::Endpoint{p.host, p.port});
    t.job_name = config.job.name;
    t.config_hash = config.hash();
    t.connect_timeout_s = config.net.connect_timeout;
    t.max_frame_bytes = config.net.max_frame_bytes;
    t.stages = sync::stage_names();
    t.max_send_rate = config.net.max_send_rate.value_or(0.0);
    t.secret = job_secret(config, std::getenv(kSecretEnvironmentVariable));
    if (t.secret.empty())
      spdlog::warn("no job secret (security.secret_file or {}): any host that can reach {} can "
                   "join this job (README.md, \"Security\")",
                   kSecretEnvironmentVariable, s.peers[s.rank].address());
    else if (!config.security.secret_file.empty() && std::getenv(kSecretEnvironmentVariable))
      spdlog::info("job secret from security.secret_file ({}); {} is ignored",
                   config.security.secret_file, kSecretEnvironmentVariable);
    s.transport = std::make_unique<net::TcpTransport>(std::move(t));
  }
  // One channel per node routes frames by stage: the start-up probe's, then the strategy's.
  s.channel.emplace(s.transport.get(), s.rank, nodes);
  sync::LinkProbeOptions probe_options;
  probe_options.max_send_rate = config.net.max_send_rate;
  s.probe.emplace(*s.channel, probe_options);
  // Routed on every node, resuming or not, so a resuming peer's list is never an unrouted stage.
  s.agreement.emplace(*s.channel, std::max(60.0, config.net.connect_timeout));

  if (s.transport) {
    spdlog::info("listening on {}, connecting to {} peer(s) (timeout {:.0f} s)",
                 s.peers[s.rank].address(), nodes - 1, config.net.connect_timeout);
    s.transport->start();
    spdlog::info("connected to every peer{}",
                 config.net.max_send_rate
                     ? ", send rate capped at " + format_rate(*config.net.max_send_rate)
                     : std::string());
  }
  if (s.options.resume) {
    try {
      agree_on_checkpoint();
    } catch (const std::exception&) {
      // A clean close delivers this node's list first: every peer then finds the same error in
      // the same lists, instead of this node's hang-up.
      if (s.transport) s.transport->shutdown(5.0);
      throw;
    }
  }
  std::optional<sync::JobMeasurements> measured;
  if (config.planner.probe) measured = measure_job(*s.probe, model, batch, config.job.seed, nodes);

  const ShardInfo shard{s.rank, nodes, batch, config.job.seed};
  // The stage needs the iterations per epoch (Ako's gamma probe spans one); the source tells.
  const std::size_t per_epoch = s.source->open(shard);
  s.stage = sync::make_sync_stage(
      config.sync.strategy,
      sync::SyncContext{model, s.executor, *s.channel, s.rank, nodes, batch, *s.optimizer,
                        sync_options(config), per_epoch, measured ? &*measured : nullptr});
  s.graph.emplace(model, *s.source, std::move(s.preprocess), s.executor, *s.stage, shard,
                  per_epoch);
  log_summary(*s.stage);
  if (!config.checkpoint.dir.empty() || s.options.resume) {
    const std::string refusal = s.stage->checkpoint_refusal();
    if (!refusal.empty()) throw ConfigError(refusal);
  }
  // Sections in load order: the replica and solver state first, then the stage, which derives
  // its own (the KV shards' master copies) from them.
  s.checkpoints.add("model", model);
  s.checkpoints.add("optimizer", *s.optimizer);
  s.checkpoints.add("cursor", *s.graph);
  s.checkpoints.add("sync", *s.stage);
  if (!config.checkpoint.dir.empty()) {
    s.store.emplace(config.checkpoint.dir, s.rank, config.checkpoint.keep);
    s.checkpoint_header = engine::CheckpointHeader{config.training_fingerprint(), s.rank, nodes, 0,
                                                   config.sync.strategy, config.training_text()};
    spdlog::info("checkpoints to {} every {} (keeping {})", s.store->node_dir().string(),
                 config.checkpoint.every ? std::to_string(*config.checkpoint.every) + " iterations"
                                         : std::string("epoch"),
                 config.checkpoint.keep);
  }
  // Every node has routed its stage's messages before any node sends one.
  if (s.transport) s.probe->barrier(1);
}

void Pipeline::agree_on_checkpoint() {
  State& s = *state_;
  const std::filesystem::path& dir = *s.options.resume;
  const engine::CheckpointStore store(dir, s.rank);
  std::vector<std::string> problems;
  const std::vector<std::uint64_t> valid = store.valid_iterations(problems);
  for (const std::string& p : problems) {
    spdlog::warn("--resume: skipping a checkpoint that does not verify: {}", p);
  }
  const auto lists = s.agreement->exchange(valid);
  std::uint64_t iteration = 0;
  try {
    iteration = sync::ResumeAgreement::newest_common(lists);
  } catch (const CheckpointError& e) {
    throw CheckpointError("--resume " + dir.string() + ": " + e.what() + " (this node looked in " +
                          store.node_dir().string() + ")");
  }
  if (iteration != valid.front()) {
    spdlog::warn("--resume: iteration {} is the newest checkpoint every node has; this node's "
                 "newest valid one is {}",
                 iteration, valid.front());
  }
  const std::string path = store.path(iteration).string();
  engine::Checkpoint checkpoint = store.load(iteration);
  const engine::CheckpointHeader& h = checkpoint.header;
  if (h.nodes != s.nodes()) {
    throw CheckpointError(path + ": written by a job of " + std::to_string(h.nodes) +
                          " nodes, this one has " + std::to_string(s.nodes()) +
                          ": resuming on another node count is not supported yet (README "
                          "\"Checkpoints and resume\")");
  }
  if (h.rank != s.rank) {
    throw CheckpointError(path + ": written by rank " + std::to_string(h.rank) +
                          ", read by rank " + std::to_string(s.rank));
  }
  if (h.config_fingerprint != s.config.training_fingerprint() ||
      h.config_text != s.config.training_text()) {
    throw ConfigError(path + ": written under another config: " +
                      config_difference(h.config_text, s.config.training_text()) +
                      " (only job.name, job.epochs, job.max_iterations, checkpoint.*, net.*, "
                      "security.*, compute.threads and data.test_limit may change on --resume)");
  }
  spdlog::info("--resume: every node continues from iteration {} ({})", iteration, path);
  s.resume_source = path;
  s.resume_from = std::move(checkpoint);
}

void Pipeline::add_checkpoint_state(std::string name, engine::Checkpointable& state) {
  State& s = *state_;
  GRADMESH_CHECK(!s.ran, "Pipeline::add_checkpoint_state after run()");
  for (const char* own : {"model", "optimizer", "cursor", "sync"}) {
    GRADMESH_CHECK(name != own, "Pipeline::add_checkpoint_state: '" + name +
                                    "' is one of the pipeline's own sections");
  }
  s.own_states.emplace_back(std::move(name), &state);
}

void Pipeline::write_checkpoint(std::uint64_t iteration, NodeMetrics& metrics) {
  State& s = *state_;
  const auto begin = Clock::now();
  finish_checkpoint_write(metrics);  // the previous file is on disk before its buffer is reused
  s.checkpoint_header.iteration = iteration;
  s.checkpoints.save(s.checkpoint_header, s.checkpoint_file);
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  ++metrics.checkpoints_written;
  metrics.checkpoint_bytes = s.checkpoint_file.size();
  metrics.checkpoint_seconds += seconds;
  spdlog::info("checkpoint of iteration {}: {:.2f} MB of state saved in {:.1f} ms (with any wait for "
               "the previous write); writing it in the background",
               iteration, static_cast<double>(s.checkpoint_file.size()) / 1e6, seconds * 1e3);
  // The write (temporary file, fsync, rename) runs beside the next iterations; the state is
  // already a copy, so training goes on at once.
  s.checkpoint_writing = iteration;
  s.checkpoint_write = std::async(std::launch::async, [&s, iteration] {
    const auto start = Clock::now();
    s.store->save(iteration, s.checkpoint_file);
    return std::chrono::duration<double>(Clock::now() - start).count();
  });
}

void Pipeline::finish_checkpoint_write(NodeMetrics& metrics) {
  State& s = *state_;
  if (!s.checkpoint_write.valid()) return;
  const double seconds = s.checkpoint_write.get();  // rethrows the write's CheckpointError
  metrics.checkpoint_write_seconds += seconds;
  spdlog::info("checkpoint of iteration {} written in {:.1f} ms ({})", s.checkpoint_writing,
               seconds * 1e3, s.store->path(s.checkpoint_writing).string());
}

engine::Graph& Pipeline::graph() {
  GRADMESH_CHECK(state_->graph.has_value(), "Pipeline::graph before build()");
  return state_->graph->graph();
}

const PipelineTasks& Pipeline::tasks() const {
  GRADMESH_CHECK(state_->graph.has_value(), "Pipeline::tasks before build()");
  return state_->graph->tasks();
}

NodeMetrics Pipeline::run() {
  State& s = *state_;
  GRADMESH_CHECK(!s.ran, "Pipeline::run called twice");
  s.ran = true;
  if (!s.graph) build();
  const JobConfig& config = s.config;
  const std::size_t nodes = s.nodes();
  const std::size_t batch = batch_size();
  tasks::Model& model = *s.model;
  IterationGraph& iteration = *s.graph;
  sync::SyncStage& stage = *s.stage;
  net::Transport* transport = s.transport.get();

  for (auto& [name, state] : s.own_states) s.checkpoints.add(name, *state);
  if (s.resume_from) {
    s.checkpoints.load(*s.resume_from, s.resume_source);
    s.resume_from.reset();
  }
  const std::uint64_t start = iteration.iterations();  // > 0 after a resume

  const std::size_t per_epoch = iteration.iterations_per_epoch();
  const std::uint64_t limit =
      std::min<std::uint64_t>(per_epoch * config.job.epochs,
                              config.job.max_iterations.value_or(per_epoch * config.job.epochs));
  spdlog::info("{} parameters, batch {} per node, {} iterations per epoch, {} iterations in all",
               model.parameter_count(), batch, per_epoch, limit);
  if (s.options.resume) {
    std::printf("[rank %zu] resumed from iteration %llu (epoch %llu, iteration %llu of it) of %s\n",
                s.rank, static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(start / per_epoch + 1),
                static_cast<unsigned long long>(start % per_epoch),
                s.resume_source.c_str());
    std::fflush(stdout);
  }

  const auto evaluate = [&]() -> std::optional<tasks::Model::Evaluation> {
    if (!s.evaluate) return std::nullopt;
    const bool training = model.training();
    model.set_training(false);
    const auto result = s.evaluate(model);
    model.set_training(training);
    return result;
  };

  NodeMetrics metrics;
  ProgressReporter progress(stdout);
  const auto bytes_sent = [transport] {
    return transport ? static_cast<double>(transport->counters().bytes_sent) : 0.0;
  };
  const auto started = Clock::now();
  std::uint64_t done = start;
  double train_seconds = 0;  // iterations only: samples/s never counts evaluation
  // At an iteration boundary (the BSP step complete on this node): every checkpoint.every
  // iterations, else at the end of each epoch; and after the last iteration.
  const auto checkpoint_due = [&](std::uint64_t in_epoch) {
    if (!s.store) return false;
    if (done == limit) return true;
    return config.checkpoint.every ? done % *config.checkpoint.every == 0 : in_epoch == per_epoch;
  };
  try {
    for (std::size_t epoch = done / per_epoch; done < limit; ++epoch) {
      double loss_sum = 0;
      const std::uint64_t first = done % per_epoch;  // > 0 only in the epoch a resume lands in
      std::uint64_t in_epoch = first;
      const auto epoch_start = Clock::now();
      const double sent_at_start = bytes_sent();
      const std::uint64_t epoch_iterations =
          std::min<std::uint64_t>(per_epoch, first + (limit - done));
      while (in_epoch < epoch_iterations) {
        const bool first_step = done == start;  // this process's first (after a resume too)
        const auto step_start = first_step ? Clock::now() : Clock::time_point{};
        loss_sum += iteration.step();
        if (first_step) {
          metrics.first_iteration_seconds =
              std::chrono::duration<double>(Clock::now() - step_start).count();
        }
        ++in_epoch;
        ++done;
        if (checkpoint_due(in_epoch)) write_checkpoint(done, metrics);
        if (progress.due(in_epoch == epoch_iterations)) {
          const double seconds =
              std::max(std::chrono::duration<double>(Clock::now() - epoch_start).count(), 1e-9);
          progress.update(ProgressSnapshot{
              s.rank, epoch + 1, config.job.epochs, in_epoch, epoch_iterations,
              static_cast<double>((in_epoch - first) * batch) / seconds,
              (bytes_sent() - sent_at_start) / 1e6 / seconds, seconds});
        }
      }
      progress.finish();
      train_seconds += std::chrono::duration<double>(Clock::now() - epoch_start).count();
      stage.pause(true);
      const auto evaluation = evaluate();
      stage.pause(false);
      const double sent = bytes_sent();
      metrics.epochs = epoch + 1;
      metrics.train_loss =
          loss_sum / static_cast<double>(std::max<std::uint64_t>(1, in_epoch - first));
      metrics.test_accuracy = evaluation ? evaluation->accuracy : 0.0;
      metrics.test_loss = evaluation ? evaluation->loss : 0.0;
      metrics.epoch_train_loss.push_back(metrics.train_loss);
      metrics.epoch_test_accuracy.push_back(metrics.test_accuracy);
      metrics.epoch_wall_seconds.push_back(
          std::chrono::duration<double>(Clock::now() - started).count());
      metrics.epoch_train_seconds.push_back(train_seconds);
      const std::string accuracy =
          evaluation ? fmt::format("  test accuracy {:.2f}%", 100.0 * evaluation->accuracy) : "";
      std::printf("[rank %zu] epoch %zu/%zu  iter %llu  loss %.4f%s  %.0f samples/s  %.1f MB sent\n",
                  s.rank, epoch + 1, config.job.epochs, static_cast<unsigned long long>(done),
                  metrics.train_loss, accuracy.c_str(),
                  static_cast<double>((done - start) * batch) / std::max(train_seconds, 1e-9),
                  sent / 1e6);
      std::fflush(stdout);
    }
    finish_checkpoint_write(metrics);
    // The stage completes its exchange; an asynchronous one (Ako) then folds in every peer's last
    // updates, which changes this replica: evaluate that final model too.
    if (stage.finish()) {
      const auto final_evaluation = evaluate();
      metrics.final_test_accuracy = final_evaluation ? final_evaluation->accuracy : 0.0;
      metrics.final_test_loss = final_evaluation ? final_evaluation->loss : 0.0;
      if (final_evaluation) {
        spdlog::info("after the final exchange: test accuracy {:.2f}%",
                     100.0 * final_evaluation->accuracy);
      }
    } else {
      metrics.final_test_accuracy = metrics.test_accuracy;
      metrics.final_test_loss = metrics.test_loss;
    }
  } catch (const std::exception& e) {
    // Tell the peers why this node stops, so each names the root cause, not this node's hang-up.
    if (transport) transport->abort(e.what());
    throw;
  }
  metrics.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  metrics.train_seconds = train_seconds;

  if (transport) {
    transport->shutdown(10.0);
    const net::Counters counters = transport->counters();
    metrics.bytes_sent = counters.bytes_sent;
    metrics.bytes_received = counters.bytes_received;
    metrics.bytes_sent_by_stage = counters.bytes_sent_by_stage;
    metrics.bytes_received_by_stage = counters.bytes_received_by_stage;
    metrics.malformed_frames = counters.malformed_frames;
  }
  metrics.rank = s.rank;
  metrics.nodes = nodes;
  metrics.strategy = std::string(stage.name());
  metrics.job = config.job.name;
  metrics.iterations = done - start;
  metrics.samples = (done - start) * batch;
  if (s.options.resume) metrics.resumed_from_iteration = start;
  metrics.samples_per_second = static_cast<double>(metrics.samples) / std::max(train_seconds, 1e-9);
  metrics.bytes_sent_per_iteration =
      metrics.iterations > 0
          ? static_cast<double>(metrics.bytes_sent) / static_cast<double>(metrics.iterations)
          : 0.0;
  metrics.rejected_messages = stage.rejected_messages();
  metrics.parameters = model.parameter_count();
  metrics.batch_size = batch;
  metrics.plan = stage.plan();
  metrics.sync = stage.summary();

  spdlog::info("done: {} iterations in {:.1f} s, {:.0f} samples/s, test accuracy {:.2f}%, {:.0f} "
               "bytes sent per iteration",
               metrics.iterations, metrics.wall_seconds, metrics.samples_per_second,
               100.0 * metrics.test_accuracy, metrics.bytes_sent_per_iteration);
  if (const auto& dir = s.options.metrics_out) {
    write_metrics(*dir, metrics);
    if (s.options.save_parameters) save_parameters(*dir, s.rank, model.parameters());
    if (s.trace) s.trace->write_chrome_trace(*dir / ("trace-" + std::to_string(s.rank) + ".json"));
  }
  return metrics;
}

}  // namespace gradmesh::app

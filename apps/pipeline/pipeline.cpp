#include "apps/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include <spdlog/spdlog.h>

#include "apps/pipeline/job_options.h"
#include "apps/pipeline/job_secret.h"
#include "apps/pipeline/pipeline_state.h"
#include "apps/pipeline/run_observer.h"
#include "apps/pipeline/run_report.h"
#include "apps/pipeline/start_up.h"
#include "apps/recovery/join_request.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "engine/trace_recorder.h"
#include "net/tcp/tcp_transport.h"
#include "sync/ako/partition_count.h"
#include "sync/lane_router.h"
#include "sync/probe/link_probe.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/make_backend.h"
#include "tasks/optim/lr_schedule.h"
#include "tasks/optim/optimizer.h"
#include "topo/launch_environment.h"
#include "topo/peer_list.h"
#include "topo/rate.h"

namespace gradmesh::app {

namespace {

using Clock = std::chrono::steady_clock;

/// Tells the peers why this node stops (net::Transport::abort_for): a PeerError passes on the
/// rank that failed (a peer that stopped for another's failure names that one), so each peer names
/// the root cause, not this node's hang-up, and survivors that roll back agree on who is gone
/// (run_with_recovery). Nothing when there is no transport (one node). Never throws.
void abort_peers(net::Transport* transport, const std::exception& e) noexcept {
  if (transport == nullptr) return;
  if (const auto* peer = dynamic_cast<const PeerError*>(&e)) {
    transport->abort_for(e.what(), peer->root_rank());
  } else {
    transport->abort(e.what());
  }
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
  state_ = std::make_unique<State>(std::move(options), std::move(membership), std::move(config),
                                   std::move(peers));
  State& s = *state_;
  const std::size_t nodes = s.nodes();
  const topo::RankChoice choice =
      launched ? launched->rank
      : nodes == 1 && !s.options.rank
          ? topo::RankChoice{0, "single node"}
          : topo::resolve_rank(s.options.rank, topo::process_environment(), nodes);
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
  if (s.config.net.min_nodes && *s.config.net.min_nodes > nodes) {
    throw ConfigError("net.min_nodes = " + std::to_string(*s.config.net.min_nodes) +
                      " is more than the job's " + std::to_string(nodes) +
                      " node(s): the job could not go on after any failure, nor start");
  }
  // Folders written only after training (metrics) or after an epoch (checkpoints) fail now.
  if (s.options.metrics_out) check_writable_folder(*s.options.metrics_out, "--metrics-out", s.rank);
  if (!s.config.checkpoint.dir.empty())
    check_writable_folder(s.config.checkpoint.dir, "checkpoint.dir", s.rank);
  spdlog::info("job '{}': strategy {}, {} node(s), rank {} (from {}), config hash {:016x}",
               s.config.job.name, s.config.sync.strategy, nodes, s.rank, s.rank_source,
               s.config.hash());
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

std::vector<std::string> Pipeline::peer_addresses() const {
  std::vector<std::string> out;
  for (std::size_t r = 0; r < state_->nodes(); ++r) out.push_back(state_->peers[r].address());
  return out;
}
std::size_t Pipeline::rank() const noexcept { return state_->rank; }
std::size_t Pipeline::nodes() const noexcept { return state_->nodes(); }
bool Pipeline::connected() const noexcept { return state_->connected; }
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
    t.peer_timeout_s = config.net.peer_timeout;
    t.handshake_timeout_s = config.net.handshake_timeout;
    t.view = static_cast<std::uint32_t>(s.membership.view);
    t.rejoin = s.options.rejoin;
    t.max_frame_bytes = config.net.max_frame_bytes;
    t.lanes = sync::lane_names();
    t.max_send_rate = config.net.max_send_rate.value_or(0.0);
    t.secret = job_secret(config, std::getenv(kSecretEnvironmentVariable));
    t.encrypt = config.security.encrypt;
    if (t.secret.empty())
      spdlog::warn(
          "no job secret (security.secret_file or {}): any host that can reach {} can "
          "join this job (README.md, \"Security\")",
          kSecretEnvironmentVariable, s.peers[s.rank].address());
    else if (!config.security.secret_file.empty() && std::getenv(kSecretEnvironmentVariable))
      spdlog::info("job secret from security.secret_file ({}); {} is ignored",
                   config.security.secret_file, kSecretEnvironmentVariable);
    s.sealed = !t.secret.empty() && t.encrypt;
    if (s.sealed)
      spdlog::info(
          "connections authenticated with the job secret; every frame after that "
          "encrypted and authenticated (ChaCha20-Poly1305, security.encrypt)");
    else if (!t.secret.empty())
      spdlog::warn(
          "security.encrypt = false: connections are authenticated when they open, then "
          "frames go in clear and unauthenticated (README.md, \"Security\")");
    s.transport = std::make_unique<net::TcpTransport>(std::move(t));
  }
  // One router per node routes frames by lane: the start-up probe's, then the strategy's.
  s.router.emplace(s.transport.get(), s.rank, nodes);
  sync::LinkProbeOptions probe_options;
  probe_options.max_send_rate = config.net.max_send_rate;
  s.probe.emplace(*s.router, probe_options);
  // Routed on every node, resuming or not, so a resuming peer's list is never an unrouted stage.
  s.agreement.emplace(*s.router, std::max(60.0, config.net.connect_timeout));

  if (s.options.rejoin) {
    if (nodes < 2) throw ConfigError("--rejoin needs peers (--peers): a job of one node has none");
    if (s.options.resume)
      throw ConfigError(
          "--rejoin and --resume exclude each other: a rejoining node takes a live "
          "peer's state, a resumed job a checkpoint's");
    if (!sync::strategy_traits(config.sync.strategy).live_membership)
      throw ConfigError(
          "Pipeline: --rejoin needs a strategy that takes a node back while the "
          "job runs (sync.strategy = " +
          sync::strategies_with(&sync::StrategyTraits::live_membership) + "; is \"" +
          config.sync.strategy +
          "\"); a BSP job with checkpoint.dir takes a restarted node back at a "
          "checkpoint boundary through run_with_recovery() (README \"When a peer "
          "fails\")");
  }
  // A config error that every node finds alike is raised before any connection: found after it,
  // the first node to stop looks like a failed peer to a slower one still starting.
  sync::check_strategy(config.sync.strategy,
                       sync::StartFacts{nodes, s.options.rejoin, config.planner.probe},
                       sync_options(config));
  if (s.transport) {
    spdlog::info("listening on {}, connecting to {} peer(s) (timeout {:.0f} s)",
                 s.peers[s.rank].address(), nodes - 1, config.net.connect_timeout);
    s.transport->start();
    s.connected = true;
    spdlog::info("connected to every peer{}",
                 config.net.max_send_rate
                     ? ", send rate capped at " + topo::format_rate(*config.net.max_send_rate)
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
  // From here on the peers are connected: a node that stops tells them why (an Abort frame),
  // or they see only its hang-up and name it instead of the rank that failed.
  try {
    std::optional<sync::JobMeasurements> measured;
    // The probe is every node's at once: the peers of a rejoining node are past it.
    if (config.planner.probe && !s.options.rejoin)
      measured = measure_job(*s.probe, model, batch, config.job.seed, nodes, s.sealed);
    // Each link's rate bounds how long one frame may hold it (control frames go between
    // fragments): the probe's measure, else the configured one.
    if (s.transport) {
      std::vector<double> rates(nodes, config.planner.bandwidth.value_or(0.0));
      if (measured)
        for (std::size_t r = 0; r < nodes; ++r)
          rates[r] = measured->links.bandwidth[s.rank * nodes + r];
      s.transport->set_link_rates(std::move(rates));
    }

    const ShardInfo shard{s.rank, nodes, batch, config.job.seed};
    // The stage needs the iterations per epoch (Ako's gamma probe spans one); the source tells.
    const std::size_t per_epoch = s.source->open(shard);
    s.stage = sync::make_sync_stage(
        config.sync.strategy,
        sync::SyncContext{model, s.executor, *s.router, s.rank, nodes, batch, *s.optimizer,
                          sync_options(config), per_epoch, measured ? &*measured : nullptr,
                          s.options.rejoin, config.net.min_nodes});
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
      s.checkpoint_header =
          CheckpointHeader{config.training_fingerprint(), s.rank, nodes, 0, config.sync.strategy,
                           config.training_text()};
      const std::string every = config.checkpoint.every
                                    ? std::to_string(*config.checkpoint.every) + " iterations"
                                    : std::string("epoch");
      spdlog::info("checkpoints to {} every {} (keeping {})", s.store->node_dir().string(), every,
                   config.checkpoint.keep);
    }
    // Every node has routed its stage's messages before any node sends one (a rejoining node's
    // peers routed theirs long ago).
    if (s.transport && !s.options.rejoin) s.probe->barrier(1);
  } catch (const std::exception& e) {
    abort_peers(s.transport.get(), e);
    throw;
  }
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

  try {
    for (auto& [name, state] : s.own_states) s.checkpoints.add(name, *state);
    if (s.resume_from) {
      if (s.resplit_from_nodes != 0) adapt_resplit();
      s.checkpoints.load(*s.resume_from, s.resume_source);
      s.resume_from.reset();
    }
    if (s.options.rejoin) {
      // A live peer's replica and clock: this node goes on from its iteration (the data cursor
      // is a pure function of the iteration number, so it lands in the same epoch and batch).
      iteration.continue_from(stage.join());
    }
  } catch (const std::exception& e) {
    abort_peers(transport, e);
    throw;
  }
  const std::uint64_t start = iteration.iterations();  // > 0 after a resume or a rejoin

  const std::size_t per_epoch = iteration.iterations_per_epoch();
  const std::uint64_t limit =
      std::min<std::uint64_t>(per_epoch * config.job.epochs,
                              config.job.max_iterations.value_or(per_epoch * config.job.epochs));
  spdlog::info("{} parameters, batch {} per node, {} iterations per epoch, {} iterations in all",
               model.parameter_count(), batch, per_epoch, limit);
  // The rate of each iteration is a function of its number alone: the same on every node, and
  // after a resume (a resume with other job.epochs stretches a cosine schedule).
  const tasks::LrSchedule schedule{tasks::parse_lr_schedule(config.optimizer.schedule),
                                   static_cast<float>(config.optimizer.lr), limit};
  if (schedule.kind != tasks::LrScheduleKind::kConstant) {
    spdlog::info("learning rate: {} schedule from {} over {} iterations", config.optimizer.schedule,
                 config.optimizer.lr, limit);
  }
  // Reporting: the console's lines and the metrics' per-epoch figures, then the program's own.
  NodeMetrics metrics;
  ConsoleReporter console(stdout);
  MetricsRecorder recorder(metrics);
  std::vector<RunObserver*> observers{&console, &recorder};
  observers.insert(observers.end(), s.observers.begin(), s.observers.end());
  const RunStart run_start{s.rank,
                           start,
                           per_epoch,
                           limit,
                           config.job.epochs,
                           s.options.resume.has_value(),
                           s.options.rejoin,
                           s.resume_source};
  for (RunObserver* o : observers) o->on_start(run_start);

  const auto evaluate = [&]() -> std::optional<tasks::Model::Evaluation> {
    if (!s.evaluate) return std::nullopt;
    const bool training = model.training();
    model.set_training(false);
    const auto result = s.evaluate(model);
    model.set_training(training);
    return result;
  };

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
  bool admit_at_epoch_end = false;
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
        s.optimizer->set_lr(schedule.at(done));
        loss_sum += iteration.step();
        if (first_step) {
          metrics.first_iteration_seconds =
              std::chrono::duration<double>(Clock::now() - step_start).count();
        }
        ++in_epoch;
        ++done;
        if (checkpoint_due(in_epoch)) {
          write_checkpoint(done, metrics);
          // Restarted nodes come back at a checkpoint boundary; at an epoch's end after its
          // evaluation (the boundary is the same on every node: BSP).
          if (in_epoch < epoch_iterations)
            admit_rejoins(done, done == limit, metrics);
          else
            admit_at_epoch_end = true;
        }
        const bool last = in_epoch == epoch_iterations;
        if (std::any_of(observers.begin(), observers.end(),
                        [last](const RunObserver* o) { return o->progress_due(last); })) {
          const double seconds =
              std::max(std::chrono::duration<double>(Clock::now() - epoch_start).count(), 1e-9);
          const ProgressSnapshot snapshot{s.rank,
                                          epoch + 1,
                                          config.job.epochs,
                                          in_epoch,
                                          epoch_iterations,
                                          static_cast<double>((in_epoch - first) * batch) / seconds,
                                          (bytes_sent() - sent_at_start) / 1e6 / seconds,
                                          seconds};
          for (RunObserver* o : observers) {
            if (o->progress_due(last)) o->on_progress(snapshot);
          }
        }
      }
      train_seconds += std::chrono::duration<double>(Clock::now() - epoch_start).count();
      stage.pause(true);
      const auto evaluation = evaluate();
      stage.pause(false);
      const EpochEnd epoch_end{
          s.rank,
          epoch + 1,
          config.job.epochs,
          done,
          loss_sum / static_cast<double>(std::max<std::uint64_t>(1, in_epoch - first)),
          evaluation,
          static_cast<double>((done - start) * batch) / std::max(train_seconds, 1e-9),
          bytes_sent(),
          std::chrono::duration<double>(Clock::now() - started).count(),
          train_seconds};
      for (RunObserver* o : observers) o->on_epoch_end(epoch_end);
      if (admit_at_epoch_end) {
        admit_at_epoch_end = false;
        admit_rejoins(done, done == limit, metrics);
      }
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
    stage.check_quorum();  // a node cut off from the job (Ako) writes no metrics
  } catch (const ViewGrowth&) {
    // Every node stops here, at the same boundary, its checkpoint on disk: a clean close, so no
    // peer takes it for failed; run_with_recovery() starts the grown view.
    if (transport) transport->shutdown(10.0);
    throw;
  } catch (const std::exception& e) {
    abort_peers(transport, e);
    throw;
  }
  metrics.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  metrics.train_seconds = train_seconds;

  if (transport) transport->shutdown(10.0);
  const CompletedRun run{transport, stage, model, config, s.options, s.membership,
                         s.rank,    nodes, batch, start,  done,      train_seconds};
  complete_metrics(metrics, run);
  report_run(metrics, run, s.trace.get());
  return metrics;
}

}  // namespace gradmesh::app

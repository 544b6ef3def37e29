#include "apps/node/node.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "apps/config/job_config.h"
#include "apps/config/rate.h"
#include "apps/node/metrics.h"
#include "apps/node/trainer.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "engine/trace_recorder.h"
#include "net/tcp/tcp_transport.h"
#include "sync/channel.h"
#include "sync/probe/link_probe.h"
#include "tasks/profile.h"
#include "topo/cost_model.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/shard_sampler.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/make_backend.h"
#include "tasks/model.h"
#include "topo/launch_environment.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<tasks::LayerSpec> layer_specs(const JobConfig& config) {
  try {
    return tasks::parse_layer_specs(config.model.layers);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());  // names model.layers and the index already
  }
}

tasks::SgdOptions sgd_options(const JobConfig& config) {
  return tasks::SgdOptions{static_cast<float>(config.optimizer.lr),
                           static_cast<float>(config.optimizer.momentum),
                           static_cast<float>(config.optimizer.weight_decay)};
}

sync::SyncOptions sync_options(const JobConfig& config) {
  sync::SyncOptions options;
  options.ps.chunk_bytes = config.sync.ps.chunk_bytes;
  options.poseidon.sfb = config.sync.poseidon.sfb;
  options.poseidon.choose = config.sync.poseidon.choose;
  options.ako.partitions = config.sync.ako.partitions;
  options.ako.staleness = config.sync.ako.staleness;
  options.ako.bandwidth = config.sync.ako.bandwidth;
  options.ako.max_send_rate = config.net.max_send_rate;
  options.planner.probe = config.planner.probe;
  options.planner.alpha = config.planner.alpha;
  options.planner.bandwidth = config.planner.bandwidth;
  options.planner.gemm_flops = config.planner.gemm_flops;
  options.planner.message_overhead = config.planner.message_overhead;
  return options;
}

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
  const tasks::ComputeProfile compute = tasks::profile_compute(model, batch, nodes, seed);
  local.forward_seconds = compute.times.forward_seconds;
  local.backward_seconds = compute.times.backward_seconds;
  local.gemm_flops = compute.gemm_flops;
  const auto profiles = nodes > 1 ? probe.exchange(local) : std::vector<sync::NodeProfile>{local};
  sync::JobMeasurements m = sync::combine(profiles);
  const topo::LinkCost link = topo::slowest_link(m.links);
  double tf = 0, tb = 0;
  for (double t : m.forward_seconds) tf += t;
  for (double t : m.backward_seconds) tb += t;
  spdlog::info("measured in {:.2f} s: slowest link alpha {:.1f} us, B {}, o {:.1f} us; "
               "GEMM {:.1f} GFLOP/s; t_f {:.2f} ms, t_b {:.2f} ms (slowest node)",
               std::chrono::duration<double>(Clock::now() - start).count(), link.alpha * 1e6,
               nodes > 1 ? format_rate(link.bandwidth) : std::string("-"),
               link.message_seconds * 1e6, m.gemm_flops / 1e9,
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

int train(const NodeOptions& options) {
  const JobConfig config = load_job_config(options.config, options.overrides);
  // Without --peers / --peers-file, SLURM's or torchrun's variables may give peers and rank.
  const auto launched = options.peers.empty() && options.peers_file.empty()
                            ? topo::launch_environment(topo::process_environment(),
                                                       config.net.port, options.rank)
                            : std::nullopt;
  const topo::PeerList peers = launched ? launched->peers : peer_list(options);
  const std::size_t nodes = peers.size();
  const topo::RankChoice rank_choice =
      launched                      ? launched->rank
      : nodes == 1 && !options.rank ? topo::RankChoice{0, "single node"}
                                    : topo::resolve_rank(options.rank, topo::process_environment(), nodes);
  const std::size_t rank = rank_choice.rank;
  spdlog::set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%^%l%$] %v");
  if (options.verbose) spdlog::set_level(spdlog::level::debug);

  const auto specs = layer_specs(config);
  spdlog::info("job '{}': strategy {}, {} node(s), rank {} (from {}), config hash {:016x}",
               config.job.name, config.sync.strategy, nodes, rank, rank_choice.source,
               config.hash());
  if (launched) spdlog::info("peers from {}", launched->source);
  if (options.verbose) spdlog::debug("effective config:\n{}", config.canonical_text());

  tasks::TrainTest data = tasks::load_fashion_mnist(config.data.path);
  if (config.data.train_limit) data.train = tasks::take_first(data.train, *config.data.train_limit);
  if (config.data.test_limit) data.test = tasks::take_first(data.test, *config.data.test_limit);
  const std::size_t batch = config.optimizer.batch_size;
  tasks::Model model(specs, tasks::sample_shape(data.train), batch, config.job.seed,
                     tasks::make_backend(config.compute.device));
  spdlog::info("compute device: {}", model.backend().description());
  tasks::cpu::set_blas_threads(blas_threads(config, peers, rank));

  engine::Executor executor({1, 1});
  std::shared_ptr<engine::TraceRecorder> trace;
  if (options.trace) {
    if (!options.metrics_out) throw ConfigError("--trace needs --metrics-out DIR");
    trace = std::make_shared<engine::TraceRecorder>();
    executor.add_observer(trace);
  }
  std::unique_ptr<net::Transport> transport;
  if (nodes > 1) {
    net::TransportOptions t;
    t.rank = rank;
    for (const topo::Peer& p : peers.peers()) t.peers.push_back(net::Endpoint{p.host, p.port});
    t.job_name = config.job.name;
    t.config_hash = config.hash();
    t.connect_timeout_s = config.net.connect_timeout;
    t.max_frame_bytes = config.net.max_frame_bytes;
    t.stages = sync::stage_names();
    t.max_send_rate = config.net.max_send_rate.value_or(0.0);
    transport = std::make_unique<net::TcpTransport>(std::move(t));
  }
  // One channel per node routes frames by stage: the start-up probe's, then the strategy's.
  sync::Channel channel(transport.get(), rank, nodes);
  sync::LinkProbeOptions probe_options;
  probe_options.max_send_rate = config.net.max_send_rate;
  sync::LinkProbe probe(channel, probe_options);
  tasks::Optimizer optimizer(sgd_options(config), model.parameter_count());
  std::unique_ptr<sync::SyncStage> stage;
  // On every exit path, before the stage, the probe or the channel is destroyed: stop the
  // transport's loop thread (no more handler calls into them; later sends throw instead of
  // touching freed memory), then let queued network jobs (which refer to them) drain.
  struct Quiesce {
    net::Transport* transport;
    engine::Executor& executor;
    ~Quiesce() {
      if (transport != nullptr) transport->close();
      executor.wait_idle();
    }
  } quiesce{transport.get(), executor};

  if (transport) {
    spdlog::info("listening on {}, connecting to {} peer(s) (timeout {:.0f} s)",
                 peers[rank].address(), nodes - 1, config.net.connect_timeout);
    transport->start();
    spdlog::info("connected to every peer{}",
                 config.net.max_send_rate
                     ? ", send rate capped at " + format_rate(*config.net.max_send_rate)
                     : std::string());
  }
  std::optional<sync::JobMeasurements> measured;
  if (config.planner.probe) measured = measure_job(probe, model, batch, config.job.seed, nodes);

  stage = sync::make_sync_stage(
      config.sync.strategy,
      sync::SyncContext{model, executor, channel, rank, nodes, batch, optimizer,
                        sync_options(config),
                        tasks::ShardSampler::iterations_per_epoch(data.train.count, nodes, batch),
                        measured ? &*measured : nullptr});
  Trainer trainer(model, data.train, executor, *stage,
                  TrainerOptions{rank, nodes, batch, config.job.seed});
  log_summary(*stage);
  // Every node has routed its stage's messages before any node sends one.
  if (transport) probe.barrier(1);

  const std::size_t per_epoch = trainer.iterations_per_epoch();
  const std::uint64_t limit =
      std::min<std::uint64_t>(per_epoch * config.job.epochs,
                              config.job.max_iterations.value_or(per_epoch * config.job.epochs));
  spdlog::info("{} parameters, batch {} per node, {} iterations per epoch, {} iterations in all",
               model.parameter_count(), batch, per_epoch, limit);

  NodeMetrics metrics;
  const auto start = Clock::now();
  std::uint64_t done = 0;
  double train_seconds = 0;  // iterations only: samples/s never counts evaluation
  try {
    for (std::size_t epoch = 0; done < limit; ++epoch) {
      double loss_sum = 0;
      std::uint64_t in_epoch = 0;
      const auto epoch_start = Clock::now();
      for (; in_epoch < per_epoch && done < limit; ++in_epoch, ++done) {
        loss_sum += trainer.step();
      }
      train_seconds += std::chrono::duration<double>(Clock::now() - epoch_start).count();
      stage->pause(true);
      const auto evaluation = model.evaluate(data.test);
      stage->pause(false);
      const double seconds = train_seconds;
      const double sent = transport ? static_cast<double>(transport->counters().bytes_sent) : 0.0;
      metrics.epochs = epoch + 1;
      metrics.train_loss = loss_sum / static_cast<double>(std::max<std::uint64_t>(1, in_epoch));
      metrics.test_accuracy = evaluation.accuracy;
      metrics.test_loss = evaluation.loss;
      metrics.epoch_train_loss.push_back(metrics.train_loss);
      metrics.epoch_test_accuracy.push_back(evaluation.accuracy);
      metrics.epoch_wall_seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      metrics.epoch_train_seconds.push_back(train_seconds);
      std::printf("[rank %zu] epoch %zu/%zu  iter %llu  loss %.4f  test accuracy %.2f%%  %.0f samples/s  %.1f MB sent\n",
                  rank, epoch + 1, config.job.epochs, static_cast<unsigned long long>(done),
                  metrics.train_loss, 100.0 * evaluation.accuracy,
                  static_cast<double>(done * batch) / std::max(seconds, 1e-9), sent / 1e6);
      std::fflush(stdout);
    }
    // The stage completes its exchange; an asynchronous one (Ako) then folds in every peer's last
    // updates, which changes this replica: evaluate that final model too.
    if (stage->finish()) {
      const auto final_evaluation = model.evaluate(data.test);
      metrics.final_test_accuracy = final_evaluation.accuracy;
      metrics.final_test_loss = final_evaluation.loss;
      spdlog::info("after the final exchange: test accuracy {:.2f}%",
                   100.0 * final_evaluation.accuracy);
    } else {
      metrics.final_test_accuracy = metrics.test_accuracy;
      metrics.final_test_loss = metrics.test_loss;
    }
  } catch (const std::exception& e) {
    // Tell the peers why this node stops, so each names the root cause, not this node's hang-up.
    if (transport) transport->abort(e.what());
    throw;
  }
  metrics.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
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
  metrics.rank = rank;
  metrics.nodes = nodes;
  metrics.strategy = std::string(stage->name());
  metrics.job = config.job.name;
  metrics.iterations = done;
  metrics.samples = done * batch;
  metrics.samples_per_second = static_cast<double>(metrics.samples) / std::max(train_seconds, 1e-9);
  metrics.bytes_sent_per_iteration =
      done > 0 ? static_cast<double>(metrics.bytes_sent) / static_cast<double>(done) : 0.0;
  metrics.rejected_messages = stage->rejected_messages();
  metrics.parameters = model.parameter_count();
  metrics.batch_size = batch;
  metrics.plan = stage->plan();
  metrics.sync = stage->summary();

  spdlog::info("done: {} iterations in {:.1f} s, {:.0f} samples/s, test accuracy {:.2f}%, {:.0f} bytes sent per iteration",
               done, metrics.wall_seconds, metrics.samples_per_second,
               100.0 * metrics.test_accuracy, metrics.bytes_sent_per_iteration);
  if (options.metrics_out) {
    write_metrics(*options.metrics_out, metrics);
    if (options.save_parameters) save_parameters(*options.metrics_out, rank, model.parameters());
    if (trace) {
      trace->write_chrome_trace(*options.metrics_out / ("trace-" + std::to_string(rank) + ".json"));
    }
  } else if (options.save_parameters) {
    throw ConfigError("--save-parameters needs --metrics-out DIR");
  }
  return 0;
}

}  // namespace

int run_node(const NodeOptions& options) {
  try {
    return train(options);
  } catch (const ConfigError& e) {
    spdlog::error("configuration error: {}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

int run_plan(const PlanOptions& options) {
  try {
    const JobConfig config = load_job_config(options.config, options.overrides);
    if (options.nodes == 0) throw ConfigError("--nodes must be >= 1");
    const auto specs = layer_specs(config);
    // The plan needs the model's shapes only: the CPU backend, whatever compute.device says.
    tasks::Model model(specs, tasks::kFashionMnistShape, config.optimizer.batch_size,
                       config.job.seed);
    engine::Executor executor({1, 1});
    const std::string strategy =
        config.sync.strategy == "none" && options.nodes > 1 ? "ps" : config.sync.strategy;
    tasks::Optimizer optimizer(sgd_options(config), model.parameter_count());
    sync::Channel channel(nullptr, 0, options.nodes);
    sync::SyncOptions sync = sync_options(config);
    if (options.bandwidth && !sync.planner.bandwidth) {
      sync.planner.bandwidth = parse_rate(*options.bandwidth);
    }
    // This machine's layer times and GEMM rate (no peers to measure links with: those come from
    // planner.alpha / planner.bandwidth / --bandwidth, else the planner's assumed rates).
    std::optional<sync::JobMeasurements> measured;
    if (config.planner.probe) {
      const tasks::ComputeProfile compute = tasks::profile_compute(
          model, config.optimizer.batch_size, options.nodes, config.job.seed);
      measured.emplace();
      measured->forward_seconds = compute.times.forward_seconds;
      measured->backward_seconds = compute.times.backward_seconds;
      measured->gemm_flops = compute.gemm_flops;
      measured->links.nodes = 0;  // not measured
    }
    auto stage = sync::make_sync_stage(
        strategy, sync::SyncContext{model, executor, channel, 0, options.nodes,
                                    config.optimizer.batch_size, optimizer, sync, 0,
                                    measured ? &*measured : nullptr});
    const auto plan = stage->plan();
    std::printf("plan for job '%s': strategy %s, %zu node(s), batch %zu per node, %zu parameters (rank 0)\n",
                config.job.name.c_str(), strategy.c_str(), options.nodes,
                config.optimizer.batch_size, model.parameter_count());
    std::printf("%s", format_plan(plan).c_str());
    std::printf("%s", format_summary(stage->summary(), measured.has_value()).c_str());
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "gradmesh-node plan: configuration error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradmesh-node plan: %s\n", e.what());
    return 1;
  }
}

}  // namespace gradmesh::app

#include "apps/pipeline/node_builder.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/pipeline/job_options.h"
#include "apps/pipeline/job_secret.h"
#include "apps/pipeline/start_up.h"
#include "engine/error.h"
#include "net/tcp/tcp_transport.h"
#include "sync/compress/options.h"
#include "sync/sync_stage.h"
#include "topo/rate.h"

namespace gradmesh::app::detail {

void NodeBuilder::build() {
  GRADMESH_CHECK(s_.program.source != nullptr, "Pipeline::build before set_source");
  GRADMESH_CHECK(!s_.plan.graph, "Pipeline::build called twice");
  const JobConfig& config = s_.job.config;
  if (s_.job.options.trace) {
    s_.runtime.trace = std::make_shared<engine::TraceRecorder>();
    s_.runtime.executor.add_observer(s_.runtime.trace);
  }
  if (s_.job.nodes() > 1) make_transport();
  // One router per node routes frames by lane: the start-up probe's, then the strategy's.
  s_.runtime.router.emplace(s_.runtime.transport.get(), s_.job.rank, s_.job.nodes());
  sync::LinkProbeOptions probe_options;
  probe_options.max_send_rate = config.net.max_send_rate;
  s_.runtime.probe.emplace(*s_.runtime.router, probe_options);
  // Routed on every node, resuming or not, so a resuming peer's list is never an unrouted stage.
  s_.runtime.agreement.emplace(*s_.runtime.router, std::max(60.0, config.net.connect_timeout));
  check_start();
  connect();
  // From here on the peers are connected: a node that stops tells them why (an Abort frame),
  // or they see only its hang-up and name it instead of the rank that failed.
  try {
    make_stage(measure());
    // Every node has routed its stage's messages before any node sends one (a rejoining node's
    // peers routed theirs long ago).
    if (s_.runtime.transport && !s_.job.options.rejoin)
      s_.runtime.probe->barrier(kStageRoutedBarrier);
  } catch (const std::exception& e) {
    abort_peers(s_.runtime.transport.get(), e);
    throw;
  }
}

void NodeBuilder::make_transport() {
  const JobConfig& config = s_.job.config;
  net::TransportOptions t;
  t.rank = s_.job.rank;
  for (const topo::Peer& p : s_.job.peers.peers()) t.peers.push_back(net::Endpoint{p.host, p.port});
  t.job_name = config.job.name;
  t.config_hash = config.hash();
  t.config_text = config.key_text();
  t.connect_timeout_s = config.net.connect_timeout;
  t.peer_timeout_s = config.net.peer_timeout;
  t.handshake_timeout_s = config.net.handshake_timeout;
  t.view = static_cast<std::uint32_t>(s_.job.membership.view);
  t.rejoin = s_.job.options.rejoin;
  t.max_frame_bytes = config.net.max_frame_bytes;
  t.lanes = sync::lane_names();
  t.max_send_rate = config.net.max_send_rate.value_or(0.0);
  t.secret = job_secret(config, std::getenv(kSecretEnvironmentVariable));
  t.encrypt = config.security.encrypt;
  if (t.secret.empty())
    spdlog::warn(
        "no job secret (security.secret_file or {}): any host that can reach the nodes' ports "
        "can join this job (README.md, \"Security\")",
        kSecretEnvironmentVariable);
  else if (!config.security.secret_file.empty() && std::getenv(kSecretEnvironmentVariable))
    spdlog::info("job secret from security.secret_file ({}); {} is ignored",
                 config.security.secret_file, kSecretEnvironmentVariable);
  s_.runtime.sealed = !t.secret.empty() && t.encrypt;
  if (s_.runtime.sealed)
    spdlog::info(
        "connections authenticated with the job secret; every frame after that "
        "encrypted and authenticated (ChaCha20-Poly1305, security.encrypt)");
  else if (!t.secret.empty())
    spdlog::warn(
        "security.encrypt = false: connections are authenticated when they open, then "
        "frames go in clear and unauthenticated (README.md, \"Security\")");
  s_.runtime.transport = std::make_unique<net::TcpTransport>(std::move(t));
}

void NodeBuilder::check_start() const {
  const JobConfig& config = s_.job.config;
  if (s_.job.options.rejoin) {
    if (s_.job.nodes() < 2)
      throw ConfigError("--rejoin needs peers (--peers): a job of one node has none");
    if (s_.job.options.resume)
      throw ConfigError(
          "--rejoin and --resume exclude each other: a rejoining node takes a live "
          "peer's state, a resumed job a checkpoint's");
    if (!sync::goes_on_without_failed_peers(config.sync.strategy, config.sync.options))
      throw ConfigError(
          "Pipeline: --rejoin needs a strategy that takes a node back while the "
          "job runs (sync.strategy = " +
          sync::strategies_with(&sync::StrategyTraits::live_membership) +
          ", or local with sync.local.quorum; is \"" + config.sync.strategy + "\"); a job of " +
          sync::strategies_with(&sync::StrategyTraits::rolls_back) +
          " with checkpoint.dir takes a restarted node back at a "
          "checkpoint boundary through run_with_recovery() (README \"When a peer "
          "fails\")");
  }
  // A config error that every node finds alike is raised before any connection: found after it,
  // the first node to stop looks like a failed peer to a slower one still starting.
  sync::check_strategy(
      config.sync.strategy,
      sync::StartFacts{s_.job.nodes(), s_.job.options.rejoin, config.planner.probe},
      sync_options(config));
}

void NodeBuilder::connect() {
  const JobConfig& config = s_.job.config;
  if (s_.runtime.transport) {
    spdlog::info("listening on {}, connecting to {} peer(s) (timeout {:.0f} s)",
                 s_.job.peers[s_.job.rank].address(), s_.job.nodes() - 1,
                 config.net.connect_timeout);
    s_.runtime.transport->start();
    s_.runtime.connected = true;
    spdlog::info("connected to every peer{}",
                 config.net.max_send_rate
                     ? ", send rate capped at " + topo::format_rate(*config.net.max_send_rate)
                     : std::string());
  }
  if (!s_.job.options.resume) return;
  try {
    s_.recovery.resume = agree_on_resume(*s_.job.options.resume, s_.job.rank, s_.job.nodes(),
                                         config, *s_.runtime.agreement);
  } catch (const std::exception&) {
    // A clean close delivers this node's list first: every peer then finds the same error in
    // the same lists, instead of this node's hang-up.
    if (s_.runtime.transport) s_.runtime.transport->shutdown(5.0);
    throw;
  }
}

std::optional<sync::JobMeasurements> NodeBuilder::measure() {
  const JobConfig& config = s_.job.config;
  const std::size_t nodes = s_.job.nodes();
  std::optional<sync::JobMeasurements> measured;
  // The probe is every node's at once: the peers of a rejoining node are past it.
  if (config.planner.probe && !s_.job.options.rejoin) {
    measured = measure_job(*s_.runtime.probe, *s_.replica.model, config.optimizer.batch_size,
                           config.job.seed, nodes, sync::compression_options(config.sync.options),
                           s_.runtime.sealed, s_.replica.optimizer->adam_options());
  }
  // Each link's rate bounds how long one frame may hold it (control frames go between
  // fragments): the probe's measure, else the configured one.
  if (s_.runtime.transport) {
    std::vector<double> rates(nodes, config.planner.bandwidth.value_or(0.0));
    if (measured)
      for (std::size_t r = 0; r < nodes; ++r)
        rates[r] = measured->links.bandwidth[s_.job.rank * nodes + r];
    s_.runtime.transport->set_link_rates(std::move(rates));
  }
  return measured;
}

void NodeBuilder::make_stage(const std::optional<sync::JobMeasurements>& measured) {
  const JobConfig& config = s_.job.config;
  const std::size_t nodes = s_.job.nodes();
  const std::size_t batch = config.optimizer.batch_size;
  tasks::Model& model = *s_.replica.model;
  const ShardInfo shard{s_.job.rank, nodes, batch, config.job.seed};
  // The stage needs the iterations per epoch (Ako's gamma probe spans one); the source tells.
  const std::size_t per_epoch = s_.program.source->open(shard);
  s_.plan.stage = sync::make_sync_stage(
      config.sync.strategy,
      sync::SyncContext{model, s_.runtime.executor, *s_.runtime.router, s_.job.rank, nodes, batch,
                        *s_.replica.optimizer, sync_options(config), per_epoch,
                        measured ? &*measured : nullptr, s_.job.options.rejoin,
                        config.net.min_nodes});
  s_.plan.graph.emplace(model, *s_.program.source, std::move(s_.program.preprocess),
                        s_.runtime.executor, *s_.plan.stage, shard, per_epoch);
  log_summary(*s_.plan.stage);
  if (!config.checkpoint.dir.empty() || s_.job.options.resume) {
    const std::string refusal = s_.plan.stage->checkpoint_refusal();
    if (!refusal.empty()) throw ConfigError(refusal);
  }
  // Sections in load order: the replica and solver state first, then the stage, which derives
  // its own (the KV shards' master copies) from them.
  s_.recovery.checkpoints.add("model", model);
  s_.recovery.checkpoints.add("optimizer", *s_.replica.optimizer);
  s_.recovery.checkpoints.add("cursor", *s_.plan.graph);
  s_.recovery.checkpoints.add("sync", *s_.plan.stage);
  if (config.checkpoint.dir.empty()) return;
  s_.recovery.checkpoint_writer.emplace(
      CheckpointStore(config.checkpoint.dir, s_.job.rank, config.checkpoint.keep),
      CheckpointHeader{config.training_fingerprint(), s_.job.rank, nodes, 0, config.sync.strategy,
                       config.training_text()});
  const std::string every = config.checkpoint.every
                                ? std::to_string(*config.checkpoint.every) + " iterations"
                                : std::string("epoch");
  spdlog::info("checkpoints to {} every {} (keeping {})",
               s_.recovery.checkpoint_writer->store().node_dir().string(), every,
               config.checkpoint.keep);
}

}  // namespace gradmesh::app::detail

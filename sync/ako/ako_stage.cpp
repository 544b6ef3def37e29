#include "sync/ako/ako_stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include <spdlog/spdlog.h>

#include "net/transport.h"
#include "sync/layer_plan.h"
#include "sync/stages.h"

namespace gradmesh::sync {

namespace {

constexpr std::size_t kProfileDoubles = 3;  // gamma (1/s), model bytes, B (bytes/s)

std::string rate_text(double bytes_per_second) {
  return fmt::format("{:.2f} MB/s", bytes_per_second / 1e6);
}

}  // namespace

AkoStage::AkoStage(SyncContext context)
    : ctx_(std::move(context)),
      floats_(ctx_.model.parameter_count()),
      lr_(ctx_.sgd.lr),
      weight_decay_(ctx_.sgd.weight_decay),
      auto_partitions_(!ctx_.options.ako.partitions.has_value()),
      clocks_(ctx_.nodes, ctx_.rank),
      inbox_(ctx_.nodes > 1 ? floats_ : 0, 0.0f),
      drained_(ctx_.nodes > 1 ? floats_ : 0, 0.0f),
      last_round_(ctx_.nodes, 0),
      staging_(floats_, 0.0f),
      gammas_(ctx_.nodes) {
  const AkoOptions& o = ctx_.options.ako;
  if (auto_partitions_) {
    if (ctx_.nodes > 1) bandwidth_ = ako::eq3_bandwidth(o);  // ConfigError when neither is set
  } else {
    bandwidth_ = o.max_send_rate.value_or(o.bandwidth.value_or(0.0));
  }
  if (ctx_.sgd.momentum != 0.0f) {
    spdlog::warn("ako: optimizer.momentum = {} is ignored: Ako applies plain SGD to local and "
                 "received gradients (SoCC'16 Algorithm 1 lines 5 and 13)",
                 ctx_.sgd.momentum);
  }
  choice_.model_bytes = static_cast<double>(floats_) * sizeof(float);
  choice_.bandwidth = bandwidth_;
  choice_.nodes = ctx_.nodes;
  if (!auto_partitions_ || ctx_.nodes == 1) {
    const std::size_t p = auto_partitions_ ? 1 : *o.partitions;
    choice_.partitions = p;
    configure(p);  // throws ConfigError for p > m
  }
  if (ctx_.transport != nullptr) {
    ctx_.transport->set_handlers(
        [this](std::size_t from, net::Message&& message) { on_message(from, std::move(message)); },
        [this](const PeerError& error) { on_failure(error); });
  }
}

AkoStage::~AkoStage() {
  stopped_.store(true);
  const std::lock_guard lock(pump_mutex_);
  if (pool_) pool_->set_on_release({});
}

std::optional<std::size_t> AkoStage::partitions() const {
  if (!agreed_.load(std::memory_order_acquire)) return std::nullopt;
  return partition_->partitions();
}

// ====================================================================== compute tasks

void AkoStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  auto gate_task = graph.emplace("ako_gate", engine::Arena::kCompute,
                                 [this](engine::TaskContext& task) { gate(task); });
  auto apply = graph.emplace("ako_apply", engine::Arena::kCompute,
                             [this](engine::TaskContext&) { apply_staging(); });
  gate_task.precede(apply);
  apply.precede(tasks.forward.at(0));
  auto hand = graph.emplace("ako_handoff", engine::Arena::kCompute,
                            [this](engine::TaskContext&) { handoff(); });
  tasks.backward.at(0).precede(hand);
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    if (ctx_.model.layer(l).parameter_count() == 0) continue;
    auto step = graph.emplace("ako_step_" + std::to_string(l), engine::Arena::kCompute,
                              [this, l](engine::TaskContext&) { step_layer(l); });
    tasks.backward[l].precede(step);
    step.precede(hand);
  }
  hand.precede(tasks.done);
}

void AkoStage::gate(engine::TaskContext& task) {
  if (!first_gate_) first_gate_ = Clock::now();
  if (ctx_.nodes == 1) return;
  const std::uint64_t c = local_clock_.load(std::memory_order_relaxed);
  // While profiling gamma there is no p yet, hence no bound: compute runs free.
  if (auto_partitions_ && !profile_sent_ && !agreed_.load(std::memory_order_acquire)) return;
  clocks_.await(c, task.defer());  // waits for agreement first (no slack before it)
}

void AkoStage::apply_staging() {
  const std::lock_guard lock(staging_mutex_);
  if (dirty_.empty()) return;
  const std::span<float> w = ctx_.model.parameters();
  for (std::size_t k = 0; k < dirty_.size(); ++k) {
    if (dirty_[k] == 0) continue;
    const ako::Range r = partition_->range(k);
    float* delta = staging_.data() + r.offset;
    float* dst = w.data() + r.offset;
    for (std::size_t i = 0; i < r.size; ++i) {
      dst[i] += delta[i];
      delta[i] = 0.0f;
    }
    dirty_[k] = 0;
  }
}

void AkoStage::step_layer(std::size_t layer) {
  const std::span<float> w = ctx_.model.layer_parameters(layer);
  const std::span<float> g = ctx_.model.layer_gradients(layer);
  const float lr = lr_;
  const float wd = weight_decay_;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (wd != 0.0f) g[i] += wd * w[i];  // the gradient that is sent includes the decay
    w[i] -= lr * g[i];
  }
}

void AkoStage::handoff() {
  const auto now = Clock::now();
  if (!first_handoff_) first_handoff_ = now;
  last_handoff_ = now;
  const std::uint64_t c = local_clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (ctx_.nodes == 1) return;
  const std::span<const float> g = ctx_.model.gradients();
  {
    const std::lock_guard lock(inbox_mutex_);
    if (inbox_count_ == 0) {
      std::memcpy(inbox_.data(), g.data(), g.size_bytes());
    } else {
      for (std::size_t i = 0; i < g.size(); ++i) inbox_[i] += g[i];
    }
    ++inbox_count_;
  }
  if (!profile_sent_ && c >= kProfileIterations &&
      now - *first_handoff_ >= std::chrono::duration<double>(kProfileSeconds)) {
    profile_sent_ = true;
    profiled_.store(c, std::memory_order_relaxed);
    const double gamma = measured_gamma();
    if (auto_partitions_) {
      ctx_.executor.post(engine::Arena::kNetwork, [this, gamma] { broadcast_profile(gamma); });
    } else {
      record_local_gamma(gamma);  // explicit p: gamma only for the summary
    }
  }
  post_pump();
}

double AkoStage::measured_gamma() const {
  const std::uint64_t c = local_clock_.load(std::memory_order_relaxed);
  if (c >= 2 && first_handoff_) {
    const double s = std::chrono::duration<double>(last_handoff_ - *first_handoff_).count();
    if (s > 0) return static_cast<double>(c - 1) / s;  // skips the first (warm-up) iteration
  }
  if (c >= 1 && first_gate_ && first_handoff_) {
    const double s = std::chrono::duration<double>(*first_handoff_ - *first_gate_).count();
    if (s > 0) return 1.0 / s;
  }
  return 0.0;
}

// ====================================================================== network side

void AkoStage::post_pump() {
  if (stopped_.load(std::memory_order_acquire)) return;
  if (pump_posted_.exchange(true, std::memory_order_acq_rel)) return;
  ctx_.executor.post(engine::Arena::kNetwork, [this] { pump(); });
}

void AkoStage::pump() {
  {
    const std::lock_guard lock(pump_mutex_);
    pump_posted_.store(false, std::memory_order_release);  // a later handoff posts again
    if (stopped_.load(std::memory_order_acquire)) return;
    if (!agreed_.load(std::memory_order_acquire)) {
      // Profiling: no p, no ring yet. Fold the gradients into the backlog (the same work per
      // gradient as the ring's add, so gamma is measured under it); they go out in round 1.
      std::uint64_t taken = 0;
      {
        const std::lock_guard inbox(inbox_mutex_);
        taken = std::exchange(inbox_count_, 0);
        if (taken > 0) inbox_.swap(drained_);
      }
      if (taken == 0) return;
      if (backlog_count_ == 0) backlog_.assign(floats_, 0.0f);  // once per job
      for (std::size_t i = 0; i < floats_; ++i) backlog_[i] += drained_[i];
      backlog_count_ += taken;
      return;
    }
    if (!queue_) {  // first round: allocate the ring and the send buffers once
      const std::size_t peers = ctx_.nodes - 1;
      queue_ = std::make_unique<ako::AccumulationQueue>(floats_, partition_->partitions());
      pool_ = std::make_unique<ako::PayloadPool>(kRoundsInFlight * peers,
                                                 partition_->max_range_floats());
      pool_->set_on_release([this] {
        if (waiting_for_buffers_.load(std::memory_order_acquire)) post_pump();
      });
      if (backlog_count_ > 0) {
        queue_->add(backlog_);
        folded_ += std::exchange(backlog_count_, 0);
        backlog_ = std::vector<float>();
      }
    }
    std::uint64_t taken = 0;
    {
      const std::lock_guard inbox(inbox_mutex_);
      taken = std::exchange(inbox_count_, 0);
      if (taken > 0) inbox_.swap(drained_);  // O(1): the compute side writes the other buffer
    }
    if (taken > 0) {
      queue_->add(drained_);
      folded_ += taken;
    }
    if (queue_->pending() > 0) {
      if (pool_->available() >= ctx_.nodes - 1) {
        waiting_for_buffers_.store(false, std::memory_order_release);
        // c_j of this round: one more than the last, with no backlog
        send_round(folded_);
        sent_clock_.store(folded_, std::memory_order_release);
      } else {
        // Sec. 4.2: the network is behind; keep accumulating into the open round. A returning
        // buffer posts the pump again.
        waiting_for_buffers_.store(true, std::memory_order_release);
        if (pool_->available() >= ctx_.nodes - 1) post_pump();  // a buffer came back meanwhile
      }
    }
  }
  const std::lock_guard lock(flush_mutex_);
  flushed_.notify_all();
}

void AkoStage::send_round(std::uint64_t t) {
  const std::uint64_t rotation = rounds_sent_.load(std::memory_order_relaxed) + 1;
  const std::span<const float> accumulated = queue_->accumulated();
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer == ctx_.rank) continue;
    const std::size_t k = partition_->range_for(peer, rotation);
    const ako::Range r = partition_->range(k);
    ako::PayloadPool::Lease lease = pool_->acquire();
    std::memcpy(lease.data().data(), accumulated.data() + r.offset, r.size * sizeof(float));
    try {
      ctx_.transport->send(peer, net::Message{static_cast<std::uint8_t>(Stage::kAkoPartition),
                                              static_cast<std::uint16_t>(MessageKind::kAkoPartition),
                                              k, t, lease.payload(r.size)});
    } catch (const PeerError& e) {
      on_failure(e);
    }
  }
  queue_->advance();
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
}

void AkoStage::broadcast_profile(double gamma) {
  const double values[kProfileDoubles] = {gamma, choice_.model_bytes, bandwidth_};
  const auto bytes = std::as_bytes(std::span<const double>(values));
  const net::Payload payload = net::Payload::copy_of(bytes);  // once per job: may allocate
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer == ctx_.rank) continue;
    try {
      ctx_.transport->send(peer, net::Message{static_cast<std::uint8_t>(Stage::kAkoControl),
                                              static_cast<std::uint16_t>(MessageKind::kAkoProfile),
                                              0, 0, payload});
    } catch (const PeerError& e) {
      on_failure(e);
    }
  }
  record_profile(ctx_.rank, values);
}

// ====================================================================== receiving

void AkoStage::on_message(std::size_t from, net::Message&& message) {
  switch (static_cast<MessageKind>(message.kind)) {
    case MessageKind::kAkoProfile:
      if (message.payload.size() != kProfileDoubles * sizeof(double)) {
        reject(from, "a profile of " + std::to_string(message.payload.size()) +
                         " bytes (expected " + std::to_string(kProfileDoubles * sizeof(double)) +
                         ")");
        return;
      }
      record_profile(from, message.payload.as<double>());
      return;
    case MessageKind::kAkoDone: {
      // Sent after a peer's last round (per-connection order: all its partitions came first).
      {
        const std::lock_guard lock(flush_mutex_);
        ++peers_done_;
      }
      flushed_.notify_all();
      return;
    }
    case MessageKind::kAkoPartition: {
      const std::lock_guard lock(receive_mutex_);
      if (!agreed_.load(std::memory_order_acquire)) {
        early_.emplace_back(from, std::move(message));  // only before p is known
        return;
      }
      apply_partition(from, message);
      return;
    }
    default:
      break;
  }
  reject(from, "unknown message kind " + std::to_string(message.kind));
}

void AkoStage::apply_partition(std::size_t from, const net::Message& message) {
  const std::size_t p = partition_->partitions();
  if (message.key >= p) {
    reject(from, "partition " + std::to_string(message.key) + " of " + std::to_string(p));
    return;
  }
  const ako::Range r = partition_->range(static_cast<std::size_t>(message.key));
  if (message.payload.size() != r.size * sizeof(float)) {
    reject(from, "partition " + std::to_string(message.key) + " of " +
                     std::to_string(message.payload.size()) + " bytes (expected " +
                     std::to_string(r.size * sizeof(float)) + ")");
    return;
  }
  if (message.round <= last_round_[from]) {
    reject(from, "partition of round " + std::to_string(message.round) + " after round " +
                     std::to_string(last_round_[from]));
    return;
  }
  last_round_[from] = message.round;
  const std::span<const float> values = message.payload.as<float>();
  {
    const std::lock_guard lock(staging_mutex_);
    float* delta = staging_.data() + r.offset;
    for (std::size_t i = 0; i < r.size; ++i) delta[i] -= lr_ * values[i];  // line 13
    dirty_[static_cast<std::size_t>(message.key)] = 1;
  }
  received_.fetch_add(1, std::memory_order_relaxed);
  clocks_.advance(from, message.round);  // line 14
}

void AkoStage::record_profile(std::size_t from, std::span<const double> values) {
  std::optional<ako::PartitionChoice> agreed;
  {
    const std::lock_guard lock(profile_mutex_);
    if (!auto_partitions_ || gammas_[from]) {
      reject(from, "an unexpected gradient-rate profile");
      return;
    }
    if (values[1] != choice_.model_bytes || values[2] != bandwidth_) {
      reject(from, fmt::format("a profile for m = {} bytes, B = {} bytes/s (this node: {}, {})",
                               values[1], values[2], choice_.model_bytes, bandwidth_));
      return;
    }
    if (!std::isfinite(values[0]) || values[0] < 0) {
      reject(from, fmt::format("a gradient rate of {}", values[0]));
      return;
    }
    gammas_[from] = values[0];
    if (++profiles_ < ctx_.nodes) return;
    double gamma = 0;  // the mean: see the class comment
    for (const auto& g : gammas_) gamma += *g / static_cast<double>(ctx_.nodes);
    choice_ = ako::partitions_for(gamma, floats_, ctx_.nodes, bandwidth_);
    agreed = choice_;
  }
  const ako::PartitionChoice& c = *agreed;
  spdlog::info("ako: p = {} by eq. 3: ceil(gamma {:.2f} gradients/s (mean over {} nodes) x m {} bytes x "
               "(n - 1) {} / B {}) = ceil({:.3f}), clamped to [1, {}]; predicted send rate {} per "
               "node; tau = {}",
               c.partitions, c.gamma, c.nodes, c.model_bytes, c.nodes - 1, rate_text(c.bandwidth),
               c.eq3, std::min(ako::kMaxAutoPartitions, floats_), rate_text(c.predicted_send_rate()),
               ctx_.options.ako.staleness);
  configure(c.partitions);
}

void AkoStage::configure(std::size_t partitions) {
  {
    const std::lock_guard lock(staging_mutex_);
    partition_.emplace(floats_, partitions);
    dirty_.assign(partitions, 0);
  }
  if (!auto_partitions_) {
    spdlog::info("ako: p = {} (sync.ako.partitions), tau = {}, m = {} floats, {} nodes", partitions,
                 ctx_.options.ako.staleness, floats_, ctx_.nodes);
  }
  {
    const std::lock_guard lock(receive_mutex_);
    agreed_.store(true, std::memory_order_release);
    for (const auto& [from, message] : early_) apply_partition(from, message);
    early_.clear();
    early_.shrink_to_fit();
  }
  clocks_.set_slack(static_cast<std::uint64_t>(partitions) + ctx_.options.ako.staleness);
  if (ctx_.nodes > 1 && ctx_.transport != nullptr) post_pump();
}

void AkoStage::record_local_gamma(double gamma) {
  const std::lock_guard lock(profile_mutex_);
  choice_.gamma = gamma;
  choice_.eq3 = bandwidth_ > 0 ? gamma * choice_.model_bytes *
                                     static_cast<double>(ctx_.nodes - 1) / bandwidth_
                               : 0.0;
}

void AkoStage::on_failure(const PeerError& error) {
  stopped_.store(true, std::memory_order_release);
  clocks_.fail_all(std::make_exception_ptr(error));
  {
    const std::lock_guard lock(flush_mutex_);  // wakes finish() if it waits on the peers
  }
  flushed_.notify_all();
}

void AkoStage::reject(std::size_t from, const std::string& why) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("ako: rejected a message from rank {}: {}", from, why);
}

// ====================================================================== end of job

bool AkoStage::finish() {
  if (ctx_.nodes == 1 || ctx_.transport == nullptr) return false;
  if (!profile_sent_) {  // the job ended inside the profiling phase
    profile_sent_ = true;
    profiled_.store(local_clock_.load(), std::memory_order_relaxed);
    const double gamma = measured_gamma();
    if (auto_partitions_) {
      ctx_.executor.post(engine::Arena::kNetwork, [this, gamma] { broadcast_profile(gamma); });
    } else {
      record_local_gamma(gamma);
    }
  }
  const std::uint64_t produced = local_clock_.load(std::memory_order_relaxed);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  bool flushed = false;
  {
    std::unique_lock lock(flush_mutex_);
    while (!stopped_.load(std::memory_order_acquire)) {
      flushed = sent_clock_.load(std::memory_order_acquire) >= produced;
      if (flushed || Clock::now() >= deadline) break;
      lock.unlock();
      post_pump();
      lock.lock();
      flushed_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
  if (!flushed && !stopped_.load()) {
    spdlog::warn("ako: {} of {} gradients were not sent before the end of the job",
                 produced - sent_clock_.load(), produced);
  }
  if (flushed) drain(deadline);
  stopped_.store(true, std::memory_order_release);
  {
    const std::lock_guard lock(pump_mutex_);
    if (pool_) pool_->set_on_release({});
  }
  // Every peer's partitions have been staged (or a peer failed, or the deadline passed): fold
  // them in, so the final replica holds every node's gradients (all replicas then agree up to
  // float rounding: plain SGD sums the same updates in another order).
  apply_staging();
  return true;
}

void AkoStage::drain(Clock::time_point deadline) {
  // A gradient's ranges reach every peer over p consecutive rounds (sec. 3.1): after the last
  // gradient, p - 1 more rounds without a new one (g* += 0 - g_(t-p)) complete its delivery.
  // Their round ids continue past c_j, so peers accept them as newer.
  if (agreed_.load(std::memory_order_acquire) && queue_) {
    const std::size_t p = partition_->partitions();
    std::unique_lock pump(pump_mutex_);
    std::fill(drained_.begin(), drained_.end(), 0.0f);
    for (std::size_t k = 1; k < p && Clock::now() < deadline; ++k) {
      while (pool_->available() < ctx_.nodes - 1 && Clock::now() < deadline &&
             !stopped_.load(std::memory_order_acquire)) {
        pump.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a write completes
        pump.lock();
      }
      if (pool_->available() < ctx_.nodes - 1) break;
      queue_->add(drained_);
      send_round(folded_ + k);
    }
  }
  // Tell every peer this node has sent all it will, then wait (bounded) for theirs.
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer == ctx_.rank) continue;
    try {
      ctx_.transport->send(peer, net::Message{static_cast<std::uint8_t>(Stage::kAkoControl),
                                              static_cast<std::uint16_t>(MessageKind::kAkoDone),
                                              0, 0, net::Payload{}});
    } catch (const PeerError& e) {
      on_failure(e);
    }
  }
  std::unique_lock lock(flush_mutex_);
  const bool all = flushed_.wait_until(lock, deadline, [&] {
    return peers_done_ == ctx_.nodes - 1 || stopped_.load(std::memory_order_acquire);
  });
  if (!all) {
    spdlog::warn("ako: {} of {} peers did not finish sending before the deadline",
                 ctx_.nodes - 1 - peers_done_, ctx_.nodes - 1);
  }
}

std::map<std::string, double> AkoStage::summary() const {
  std::map<std::string, double> out;
  {
    const std::lock_guard lock(profile_mutex_);
    out["partitions"] = static_cast<double>(choice_.partitions);
    out["gamma"] = choice_.gamma;
    out["model_bytes"] = choice_.model_bytes;
    out["bandwidth"] = choice_.bandwidth;
    out["nodes"] = static_cast<double>(choice_.nodes);
    out["predicted_send_rate"] = choice_.predicted_send_rate();
    out["eq3"] = choice_.eq3;
  }
  out["staleness"] = static_cast<double>(ctx_.options.ako.staleness);
  out["gradients"] = static_cast<double>(local_clock_.load());
  out["rounds_sent"] = static_cast<double>(rounds_sent_.load());
  out["partitions_received"] = static_cast<double>(received_.load());
  out["staleness_waits"] = static_cast<double>(clocks_.waits());
  out["profile_iterations"] = static_cast<double>(profiled_.load());
  return out;
}

std::vector<LayerPlan> AkoStage::plan() const {
  std::size_t p = std::max<std::size_t>(1, ctx_.nodes - 1);  // auto, before agreement: a guess
  if (auto q = partitions()) p = *q;
  const double overhead = frame_overhead_bytes(Stage::kAkoPartition, MessageKind::kAkoPartition);
  std::vector<LayerPlan> rows;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    LayerPlan row = describe_layer(ctx_.model, l, "ako");
    // Sec. 3.2: per gradient (one round), one partition of m / p floats in one frame to each of
    // the n - 1 peers; this layer's share of those bytes (frame headers shared pro rata).
    const double share = static_cast<double>(row.parameters) / static_cast<double>(floats_);
    row.predicted_bytes_sent =
        static_cast<double>(ctx_.nodes - 1) *
        (static_cast<double>(row.parameters * sizeof(float)) / static_cast<double>(p) +
         share * overhead);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace gradmesh::sync

#include "sync/ako/ako_stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <spdlog/spdlog.h>

#include "sync/layer_plan.h"
#include "sync/probe/link_probe.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

namespace {

constexpr std::size_t kProfileDoubles = 3;  // gamma (1/s), model bytes, B (bytes/s)
constexpr unsigned kPartitionShift = 32;    // ako::Kind::kPartition key: p << 32 | k

std::string rate_text(double bytes_per_second) {
  return fmt::format("{:.2f} MB/s", bytes_per_second / 1e6);
}

std::size_t handoff_slots(std::size_t floats) {
  const std::size_t fit = AkoStage::kHandoffBytes / std::max<std::size_t>(1, floats * sizeof(float));
  return std::clamp<std::size_t>(fit, 2, AkoStage::kHandoffSlots);
}

}  // namespace

AkoStage::AkoStage(SyncContext context)
    : ctx_(std::move(context)),
      floats_(ctx_.model.parameter_count()),
      lr_(ctx_.optimizer.options().lr),
      auto_partitions_(!ctx_.options.ako.partitions.has_value()),
      clocks_(ctx_.nodes, ctx_.rank),
      channel_(ctx_.channel),
      partition_stage_(channel_.route(ako::kPartitionStage, [this](std::size_t from, net::Message&& m) {
        on_message(from, std::move(m));
      })),
      control_stage_(channel_.route(ako::kControlStage, [this](std::size_t from, net::Message&& m) {
        on_message(from, std::move(m));
      })),
      full_round_stage_(channel_.route(ako::kFullRoundStage, [this](std::size_t from, net::Message&& m) {
        on_message(from, std::move(m));
      })),
      partition_frame_overhead_(frame_overhead_bytes(
          partition_stage_, static_cast<std::uint16_t>(ako::Kind::kPartition))),
      last_round_(ctx_.nodes, 0),
      staging_(floats_, 0.0f),
      dirty_((floats_ + kStagingBlock - 1) / kStagingBlock, 0) {
  const AkoOptions& o = ctx_.options.ako;
  if (auto_partitions_) {
    std::optional<double> measured = ctx_.options.planner.bandwidth;
    if (!measured && ctx_.measured != nullptr) {
      measured = topo::slowest_link(ctx_.measured->links).bandwidth;
    }
    if (ctx_.nodes > 1) bandwidth_ = ako::eq3_bandwidth(o, measured);  // ConfigError: none known
  } else {
    bandwidth_ = o.max_send_rate.value_or(o.bandwidth.value_or(0.0));
  }
  if (ctx_.optimizer.options().momentum != 0.0f) {
    spdlog::warn("ako: optimizer.momentum = {} is ignored: Ako applies plain SGD to local and "
                 "received gradients (SoCC'16 Algorithm 1 lines 5 and 13)",
                 ctx_.optimizer.options().momentum);
  }
  if (auto_partitions_ && ctx_.nodes > 1) {
    settle_seconds_ = 2.0 * static_cast<double>(floats_ * sizeof(float)) *
                      static_cast<double>(ctx_.nodes - 1) / bandwidth_;
  }
  for (std::size_t plan = 0; plan < kPlans; ++plan) {
    gammas_[plan].assign(ctx_.nodes, std::nullopt);
    choices_[plan].model_bytes = static_cast<double>(floats_) * sizeof(float);
    choices_[plan].bandwidth = bandwidth_;
    choices_[plan].nodes = ctx_.nodes;
  }
  if (ctx_.nodes > 1) handoff_.emplace(floats_, handoff_slots(floats_));
  if (auto_partitions_ && ctx_.nodes > 1) {
    // Warm-up (p = 1) runs under the loosest bound auto p can end with, p_max + tau: unbounded,
    // one node that starts faster ran 900 iterations ahead and then stalled for seconds.
    clocks_.set_slack(static_cast<std::uint64_t>(ako::max_auto_partitions(floats_)) + o.staleness);
  }
  if (!auto_partitions_) {
    const std::size_t p = *o.partitions;
    (void)ako::RangePartition(floats_, p);  // ConfigError for p > m
    choices_[0].partitions = p;
    spdlog::info("ako: p = {} (sync.ako.partitions), tau = {}, m = {} floats, {} nodes", p,
                 o.staleness, floats_, ctx_.nodes);
    agree(0, p);
  } else if (ctx_.nodes == 1) {
    for (std::size_t plan = 0; plan < kPlans; ++plan) agree(plan, 1);
  }
  channel_.on_failure([this](const PeerError& error) { on_failure(error); });
}

AkoStage::~AkoStage() {
  stopped_.store(true);
  const std::lock_guard lock(pump_mutex_);
  if (pool_) pool_->set_on_release({});
}

std::optional<std::size_t> AkoStage::partitions() const {
  const std::size_t needed = plans_needed();
  if (agreed_.load(std::memory_order_acquire) < needed) return std::nullopt;
  return plans_[needed - 1];
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
  if (ctx_.nodes == 1) return;
  // In warm-up the slack is the loosest auto p can end with (constructor); after this node's
  // warm-up profile, agreement on p1 sets p1 + tau. Explicit p: p + tau from the start.
  clocks_.await(local_clock_.load(std::memory_order_relaxed), task.defer());
}

void AkoStage::apply_staging() {
  const std::lock_guard lock(staging_mutex_);
  const std::span<float> w = ctx_.model.parameters();
  for (std::size_t b = 0; b < dirty_.size(); ++b) {
    if (dirty_[b] == 0) continue;
    const std::size_t begin = b * kStagingBlock;
    const std::size_t end = std::min(floats_, begin + kStagingBlock);
    for (std::size_t i = begin; i < end; ++i) {
      w[i] += staging_[i];
      staging_[i] = 0.0f;
    }
    dirty_[b] = 0;
  }
}

void AkoStage::step_layer(std::size_t layer) {
  // The gradient that is sent includes the weight decay (Optimizer::step_plain).
  ctx_.optimizer.step_plain(ctx_.model.layer_parameters(layer), ctx_.model.layer_gradients(layer));
}

void AkoStage::handoff() {
  const auto now = Clock::now();
  last_handoff_ = now;
  const std::uint64_t c = local_clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (ctx_.nodes == 1) return;
  handoff_->put(ctx_.model.gradients());
  if (profiles_sent_ < plans_needed()) {
    // Profile `profiles_sent_` measures from the first handoff at which this node runs the phase
    // it plans for: the job's first (warm-up, or an explicit p), or the first after agreeing on
    // p1 (the probe). The window starts after that gradient, skipping the phase's first one.
    if (!profile_started_) {
      const std::size_t agreed = agreed_.load(std::memory_order_acquire);
      if (agreed >= 1 && !agreed_at_) agreed_at_ = now;
      if (agreed >= profiles_sent_ &&
          (profiles_sent_ == 0 ||
           now - *agreed_at_ >= std::chrono::duration<double>(settle_seconds_))) {
        profile_started_ = true;
        profile_start_ = now;
        profile_start_clock_ = c;
      }
    } else {
      const bool probe = profiles_sent_ > 0;
      const std::uint64_t iterations = c - profile_start_clock_;
      const double seconds = std::chrono::duration<double>(now - profile_start_).count();
      const std::uint64_t enough =
          probe ? std::max<std::uint64_t>(kProfileIterations, ctx_.iterations_per_epoch)
                : kProfileIterations;
      const bool done = iterations >= enough &&
                        seconds >= (probe ? kProbeSeconds : kProfileSeconds);
      const bool too_long =
          probe && iterations >= kProfileIterations && seconds >= kProbeMaxSeconds;
      if (done || too_long) end_profile(profiles_sent_, profile_gamma());
    }
  }
  post_pump();
}

double AkoStage::profile_gamma() const {
  const std::uint64_t c = local_clock_.load(std::memory_order_relaxed);
  if (!profile_started_ || c <= profile_start_clock_) return 0.0;
  const double s = std::chrono::duration<double>(last_handoff_ - profile_start_).count();
  return s > 0 ? static_cast<double>(c - profile_start_clock_) / s : 0.0;
}

void AkoStage::end_profile(std::size_t plan, double gamma) {
  profile_started_ = false;
  profiles_sent_ = plan + 1;
  if (profiles_sent_ == plans_needed()) {
    profiled_.store(local_clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  if (auto_partitions_) {
    ctx_.executor.post(engine::Arena::kNetwork,
                       [this, plan, gamma] { broadcast_profile(plan, gamma); });
  } else {
    record_local_gamma(gamma);  // explicit p: gamma only for the summary
  }
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
    const std::size_t agreed = agreed_.load(std::memory_order_acquire);
    const auto phase_after = [&](std::size_t plans) {
      return plans == plans_needed() ? Phase::kSteady : Phase::kProbe;
    };
    if (!queue_) {  // the first pump: warm-up, or straight to an agreed (explicit) p
      if (agreed == 0) {
        start_phase(Phase::kWarmup, 1);
      } else {
        start_phase(phase_after(agreed), plans_[agreed - 1]);
      }
    }
    if (phase_ == Phase::kWarmup && agreed >= 1) {
      // Every warm-up round delivered its gradients whole (p = 1): the ring at p starts empty, and
      // the gradients folded since the last warm-up round, never sent, open its first round.
      const std::unique_ptr<ako::AccumulationQueue> warm = std::move(queue_);
      start_phase(phase_after(agreed), plans_[agreed - 1]);
      if (warm->pending() > 0) queue_->add(warm->accumulated());  // p = 1: g* = the unsent ones
    }
    if (phase_ == Phase::kProbe && agreed == kPlans) {
      if (plans_[1] != partition_->partitions()) {
        // Each peer gets, whole, what it lacks of this node's gradients; then a fresh ring at p.
        send_undelivered(folded_);
        sent_clock_.store(folded_, std::memory_order_release);
        start_phase(Phase::kSteady, plans_[1]);
      } else {
        phase_ = Phase::kSteady;  // the probe confirmed p1: keep the ring
      }
    }
    // One round per handed-off slot (a slot holds several gradients only if the ring filled up).
    // In warm-up every slot folds into the open round, which goes out when the previous warm-up
    // round has been written (one in flight: the transport's send cap paces them).
    const bool warmup = phase_ == Phase::kWarmup;
    // When the send buffers are all in flight the network is behind (bandwidth-bound): every
    // waiting gradient folds into the open round at once (sec. 4.2), so none waits in the ring
    // and goes out later, staler. (Queueing them instead made 8 nodes at p = 24 diverge.)
    bool behind = false;
    while (true) {
      if (!warmup && !behind && queue_->pending() > 0) {
        if (have_buffers(ctx_.nodes - 1)) {
          send_round(folded_);  // round tag = c_j of the round's last gradient
          sent_clock_.store(folded_, std::memory_order_release);
        } else {
          behind = true;  // a returning buffer posts the pump, which sends the open round
        }
      }
      const auto slot = handoff_->claim();
      if (!slot) break;
      queue_->add(slot->gradient);
      folded_ += slot->count;
      handoff_->release();
    }
    if (warmup && queue_->pending() > 0 && have_buffers(1)) {
      send_warmup_round(folded_);
      sent_clock_.store(folded_, std::memory_order_release);
    }
  }
  const std::lock_guard lock(flush_mutex_);
  flushed_.notify_all();
}

bool AkoStage::have_buffers(std::size_t buffers) {
  if (pool_->available() >= buffers) {
    waiting_for_buffers_.store(false, std::memory_order_release);
    return true;
  }
  // Sec. 4.2: the network is behind; handed-off gradients fold into the open round. A returning
  // buffer posts the pump again, which sends it.
  waiting_for_buffers_.store(true, std::memory_order_release);
  if (pool_->available() >= buffers) post_pump();  // one came back meanwhile
  return false;
}

void AkoStage::start_phase(Phase phase, std::size_t partitions) {
  // Once per phase (at most three per job): the ring and the send buffers, allocated up front.
  if (pool_) pool_->set_on_release({});  // its buffers still in the transport return to it
  pool_.reset();
  queue_.reset();
  phase_ = phase;
  if (phase == Phase::kWarmup) {
    partition_.reset();
    queue_ = std::make_unique<ako::AccumulationQueue>(floats_, 1);
    // One m-float buffer per round; one round in flight, so the switch to p finds at most one
    // warm-up round still to be written (see settle_seconds_).
    pool_ = std::make_unique<ako::PayloadPool>(1, floats_);
  } else {
    partition_.emplace(floats_, partitions);
    queue_ = std::make_unique<ako::AccumulationQueue>(floats_, partitions);
    pool_ = std::make_unique<ako::PayloadPool>(kRoundsInFlight * (ctx_.nodes - 1),
                                               partition_->max_range_floats());
  }
  pool_->set_on_release([this] {
    if (waiting_for_buffers_.load(std::memory_order_acquire)) post_pump();
  });
}

void AkoStage::send_warmup_round(std::uint64_t t) {
  ako::PayloadPool::Lease lease = pool_->acquire();
  const std::span<const float> accumulated = queue_->accumulated();
  std::memcpy(lease.data().data(), accumulated.data(), accumulated.size_bytes());
  // One payload, shared by every peer's frame.
  broadcast(full_round_stage_, ako::Kind::kFullRound, 0, t, lease.payload(floats_));
  queue_->advance();
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
  full_rounds_.fetch_add(1, std::memory_order_relaxed);
}

void AkoStage::send_round(std::uint64_t t) {
  const std::uint64_t rotation = queue_->round();  // ako::undelivered() assumes this rotation
  const std::size_t p = partition_->partitions();
  const std::span<const float> accumulated = queue_->accumulated();
  double wire = 0;
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer == ctx_.rank) continue;
    const std::size_t k = partition_->range_for(peer, rotation);
    const ako::Range r = partition_->range(k);
    ako::PayloadPool::Lease lease = pool_->acquire();
    std::memcpy(lease.data().data(), accumulated.data() + r.offset, r.size * sizeof(float));
    wire += static_cast<double>(r.size * sizeof(float)) + partition_frame_overhead_;
    const std::uint64_t key = (static_cast<std::uint64_t>(p) << kPartitionShift) | k;
    send_to(peer, partition_stage_, ako::Kind::kPartition, key, t, lease.payload(r.size));
  }
  queue_->advance();
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
  if (phase_ == Phase::kSteady && !flushing_.load(std::memory_order_acquire)) {
    const auto now = Clock::now();
    if (steady_rounds_++ == 0) {
      steady_first_ = now;
      steady_first_clock_ = t;
    } else {
      steady_bytes_ += wire;
    }
    steady_last_ = now;
    steady_last_clock_ = t;
  }
}

void AkoStage::send_undelivered(std::uint64_t t) {
  // Once or twice per job (a switch of p, the end): allocates one m-float payload per peer.
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer == ctx_.rank) continue;
    net::Payload payload = net::Payload::allocate(floats_ * sizeof(float));
    const std::span<std::byte> bytes = payload.mutable_bytes();
    ako::undelivered(*queue_, *partition_, peer,
                     std::span<float>(reinterpret_cast<float*>(bytes.data()), floats_));
    send_to(peer, full_round_stage_, ako::Kind::kFullRound, 0, t, std::move(payload));
  }
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
  full_rounds_.fetch_add(1, std::memory_order_relaxed);
}

void AkoStage::send_to(std::size_t peer, StageId stage, ako::Kind kind, std::uint64_t key,
                       std::uint64_t round, net::Payload payload) {
  if (auto error = channel_.send(peer, net::Message{stage, static_cast<std::uint16_t>(kind), key,
                                                    round, std::move(payload)})) {
    on_failure(*error);  // stops sending; the gate rethrows it
  }
}

void AkoStage::broadcast(StageId stage, ako::Kind kind, std::uint64_t key, std::uint64_t round,
                         const net::Payload& payload) {
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer != ctx_.rank) send_to(peer, stage, kind, key, round, payload);
  }
}

void AkoStage::broadcast_profile(std::size_t plan, double gamma) {
  const double values[kProfileDoubles] = {gamma, choices_[plan].model_bytes, bandwidth_};
  const auto bytes = std::as_bytes(std::span<const double>(values));
  // Twice per job: may allocate.
  broadcast(control_stage_, ako::Kind::kProfile, plan, 0, net::Payload::copy_of(bytes));
  record_profile(ctx_.rank, plan, values);
}

// ====================================================================== receiving

void AkoStage::on_message(std::size_t from, net::Message&& message) {
  switch (static_cast<ako::Kind>(message.kind)) {
    case ako::Kind::kProfile:
      if (message.payload.size() != kProfileDoubles * sizeof(double)) {
        reject(from, "a profile of " + std::to_string(message.payload.size()) +
                         " bytes (expected " + std::to_string(kProfileDoubles * sizeof(double)) +
                         ")");
        return;
      }
      if (!auto_partitions_ || message.key >= kPlans) {
        reject(from, "an unexpected gradient-rate profile (plan " + std::to_string(message.key) +
                         ")");
        return;
      }
      record_profile(from, static_cast<std::size_t>(message.key), message.payload.as<double>());
      return;
    case ako::Kind::kDone: {
      // Sent after a peer's last round (per-connection order: all its partitions came first).
      {
        const std::lock_guard lock(flush_mutex_);
        ++peers_done_;
      }
      flushed_.notify_all();
      return;
    }
    case ako::Kind::kPartition: {
      const std::lock_guard lock(receive_mutex_);
      apply_partition(from, message);
      return;
    }
    case ako::Kind::kFullRound: {
      const std::lock_guard lock(receive_mutex_);
      apply_full_round(from, message);
      return;
    }
    default:
      break;
  }
  reject(from, "unknown message kind " + std::to_string(message.kind));
}

void AkoStage::apply_partition(std::size_t from, const net::Message& message) {
  // The message names its p: a peer may send at p1 or the final p before or after this node
  // switches (class comment).
  const std::uint64_t p = message.key >> kPartitionShift;
  const std::uint64_t k = message.key & ((std::uint64_t{1} << kPartitionShift) - 1);
  if (p < 1 || p > floats_ || k >= p) {
    reject(from, "partition " + std::to_string(k) + " of p = " + std::to_string(p) + " (m = " +
                     std::to_string(floats_) + " floats)");
    return;
  }
  const ako::Range r =
      ako::RangePartition(floats_, static_cast<std::size_t>(p)).range(static_cast<std::size_t>(k));
  if (message.payload.size() != r.size * sizeof(float)) {
    reject(from, "partition " + std::to_string(k) + " of p = " + std::to_string(p) + " with " +
                     std::to_string(message.payload.size()) + " bytes (expected " +
                     std::to_string(r.size * sizeof(float)) + ")");
    return;
  }
  if (message.round <= last_round_[from]) {
    reject(from, "a partition of round " + std::to_string(message.round) + " after round " +
                     std::to_string(last_round_[from]));
    return;
  }
  last_round_[from] = message.round;
  stage(r.offset, message.payload.as<float>());
  received_.fetch_add(1, std::memory_order_relaxed);
  clocks_.advance(from, message.round);  // line 14
}

void AkoStage::apply_full_round(std::size_t from, const net::Message& message) {
  if (message.payload.size() != floats_ * sizeof(float)) {
    reject(from, "a full round of " + std::to_string(message.payload.size()) +
                     " bytes (expected " + std::to_string(floats_ * sizeof(float)) + ")");
    return;
  }
  // A switch or the end may follow the last round without a new gradient: the same tag again.
  if (message.round < last_round_[from]) {
    reject(from, "a full round of round " + std::to_string(message.round) + " after round " +
                     std::to_string(last_round_[from]));
    return;
  }
  last_round_[from] = message.round;
  stage(0, message.payload.as<float>());
  full_received_.fetch_add(1, std::memory_order_relaxed);
  clocks_.advance(from, message.round);  // line 14
}

void AkoStage::stage(std::size_t offset, std::span<const float> values) {
  const std::lock_guard lock(staging_mutex_);
  float* delta = staging_.data() + offset;
  const float lr = lr_;
  for (std::size_t i = 0; i < values.size(); ++i) delta[i] -= lr * values[i];  // line 13
  if (values.empty()) return;
  const std::size_t last = (offset + values.size() - 1) / kStagingBlock;
  for (std::size_t b = offset / kStagingBlock; b <= last; ++b) dirty_[b] = 1;
}

void AkoStage::record_profile(std::size_t from, std::size_t plan, std::span<const double> values) {
  std::optional<ako::PartitionChoice> agreed;
  {
    const std::lock_guard lock(profile_mutex_);
    if (gammas_[plan][from]) {
      reject(from, "a second gradient-rate profile for plan " + std::to_string(plan));
      return;
    }
    if (values[1] != choices_[plan].model_bytes || values[2] != bandwidth_) {
      reject(from, fmt::format("a profile for m = {} bytes, B = {} bytes/s (this node: {}, {})",
                               values[1], values[2], choices_[plan].model_bytes, bandwidth_));
      return;
    }
    if (!std::isfinite(values[0]) || values[0] < 0) {
      reject(from, fmt::format("a gradient rate of {}", values[0]));
      return;
    }
    gammas_[plan][from] = values[0];
    if (++profiles_[plan] < ctx_.nodes) return;
    double gamma = 0;  // the mean: see the class comment
    for (const auto& g : gammas_[plan]) gamma += *g / static_cast<double>(ctx_.nodes);
    choices_[plan] = ako::partitions_for(gamma, floats_, ctx_.nodes, bandwidth_);
    agreed = choices_[plan];
  }
  const ako::PartitionChoice& c = *agreed;
  spdlog::info("ako: {} p = {} by eq. 3: ceil(gamma {:.2f} gradients/s (mean over {} nodes, {}) x "
               "m {} bytes x (n - 1) {} / B {}) = ceil({:.3f}), clamped to [1, {}]; predicted send "
               "rate {} per node; tau = {}",
               plan == 0 ? "warm-up plan:" : "final plan:", c.partitions, c.gamma, c.nodes,
               plan == 0 ? "profiled at p = 1" : "profiled at the warm-up plan's p", c.model_bytes,
               c.nodes - 1, rate_text(c.bandwidth), c.eq3,
               ako::max_auto_partitions(floats_), rate_text(c.predicted_send_rate()),
               ctx_.options.ako.staleness);
  if (c.predicted_send_rate() > c.bandwidth * 1.0000001) {
    spdlog::warn("ako: p is capped at {} (the accumulation queue holds p copies of the model, at "
                 "most {} MB), so the predicted send rate {} exceeds B = {}: the network will be "
                 "the bottleneck and rounds will carry several gradients",
                 c.partitions, ako::kMaxRingBytes >> 20, rate_text(c.predicted_send_rate()),
                 rate_text(c.bandwidth));
  }
  agree(plan, c.partitions);
}

void AkoStage::agree(std::size_t plan, std::size_t partitions) {
  plans_[plan] = partitions;
  agreed_.store(plan + 1, std::memory_order_release);
  clocks_.set_slack(static_cast<std::uint64_t>(partitions) + ctx_.options.ako.staleness);
  if (ctx_.nodes > 1 && channel_.connected()) post_pump();
}

void AkoStage::record_local_gamma(double gamma) {
  const std::lock_guard lock(profile_mutex_);
  ako::PartitionChoice& c = choices_[0];
  c.gamma = gamma;
  c.eq3 = bandwidth_ > 0 ? gamma * c.model_bytes * static_cast<double>(ctx_.nodes - 1) / bandwidth_
                         : 0.0;
}

void AkoStage::on_failure(const PeerError& error) {
  failed_.store(true, std::memory_order_release);
  stopped_.store(true, std::memory_order_release);
  clocks_.fail_all(std::make_exception_ptr(error));
  {
    const std::lock_guard lock(flush_mutex_);  // wakes finish() if it waits on the peers
  }
  flushed_.notify_all();
}

void AkoStage::reject(std::size_t from, const std::string& why) {
  channel_.reject(from, partition_stage_, why);
}

// ====================================================================== end of job

bool AkoStage::finish() {
  if (ctx_.nodes == 1 || !channel_.connected()) return false;
  // Profiles the job ended too early to complete: every node's gamma is needed for every plan.
  while (profiles_sent_ < plans_needed()) end_profile(profiles_sent_, profile_gamma());
  const std::uint64_t produced = local_clock_.load(std::memory_order_relaxed);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  flushing_.store(true, std::memory_order_release);  // rounds from here on: not training's
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
  {
    // A gradient's ranges reach a peer over p rounds (sec. 3.1): send each peer, once, whole,
    // what it has not received yet (warm-up rounds need nothing: they delivered whole). Then
    // stop the network side, so no later pump sends anything.
    const std::lock_guard pump(pump_mutex_);
    if (flushed && !stopped_.load(std::memory_order_acquire) && queue_ &&
        phase_ != Phase::kWarmup) {
      send_undelivered(folded_);
    }
    stopped_.store(true, std::memory_order_release);
    if (pool_) pool_->set_on_release({});
  }
  // Tell every peer this node has sent all it will, then wait (bounded) for theirs.
  broadcast(control_stage_, ako::Kind::kDone, 0, 0, net::Payload{});
  {
    std::unique_lock lock(flush_mutex_);
    const bool all = flushed_.wait_until(lock, deadline, [&] {
      return peers_done_ == ctx_.nodes - 1 || failed_.load(std::memory_order_acquire);
    });
    if (!all) {
      spdlog::warn("ako: {} of {} peers did not finish sending before the deadline",
                   ctx_.nodes - 1 - peers_done_, ctx_.nodes - 1);
    }
  }
  // Every peer's partitions have been staged (or a peer failed, or the deadline passed): fold
  // them in, so the final replica holds every node's gradients (all replicas then agree up to
  // float rounding: plain SGD sums the same updates in another order).
  apply_staging();
  return true;
}

void AkoStage::pause(bool paused) {
  const auto now = Clock::now();
  // An open profile window leaves the pause out: its start moves later by the pause's length.
  if (paused) {
    paused_at_ = now;
  } else if (profile_started_ && paused_at_) {
    profile_start_ += now - *paused_at_;
  }
  const std::lock_guard lock(pump_mutex_);
  if (paused) {
    pauses_.emplace_back(now, Clock::time_point::max());  // once per epoch: may allocate
  } else if (!pauses_.empty()) {
    pauses_.back().second = now;
  }
}

std::map<std::string, double> AkoStage::summary() const {
  std::map<std::string, double> out;
  {
    const std::lock_guard lock(profile_mutex_);
    const ako::PartitionChoice& c = choices_[plans_needed() - 1];
    out["partitions"] = static_cast<double>(c.partitions);
    out["gamma"] = c.gamma;
    out["model_bytes"] = c.model_bytes;
    out["bandwidth"] = c.bandwidth;
    out["nodes"] = static_cast<double>(c.nodes);
    out["predicted_send_rate"] = c.predicted_send_rate();
    out["eq3"] = c.eq3;
    out["warmup_gamma"] = auto_partitions_ ? choices_[0].gamma : 0.0;
    out["warmup_partitions"] = auto_partitions_ ? static_cast<double>(choices_[0].partitions) : 0.0;
  }
  out["staleness"] = static_cast<double>(ctx_.options.ako.staleness);
  out["gradients"] = static_cast<double>(local_clock_.load());
  out["rounds_sent"] = static_cast<double>(rounds_sent_.load());
  out["full_rounds"] = static_cast<double>(full_rounds_.load());
  out["partitions_received"] = static_cast<double>(received_.load());
  out["full_rounds_received"] = static_cast<double>(full_received_.load());
  out["staleness_waits"] = static_cast<double>(clocks_.waits());
  out["profile_iterations"] = static_cast<double>(profiled_.load());
  {
    const std::lock_guard lock(pump_mutex_);
    double seconds = 0;
    if (steady_rounds_ >= 2) {
      seconds = std::chrono::duration<double>(steady_last_ - steady_first_).count();
      for (const auto& [begin, end] : pauses_) {  // less the pauses within the window
        const auto from = std::max(begin, steady_first_);
        const auto to = std::min(end, steady_last_);
        if (to > from) seconds -= std::chrono::duration<double>(to - from).count();
      }
    }
    out["measured_seconds"] = seconds;
    out["measured_send_rate"] = seconds > 0 ? steady_bytes_ / seconds : 0.0;
    out["measured_gamma"] =
        seconds > 0 ? static_cast<double>(steady_last_clock_ - steady_first_clock_) / seconds : 0.0;
  }
  return out;
}

std::vector<LayerPlan> AkoStage::plan() const {
  std::size_t p = std::max<std::size_t>(1, ctx_.nodes - 1);  // auto, before agreement: a guess
  if (auto q = partitions()) p = *q;
  const double overhead = partition_frame_overhead_;
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

// AkoStage: construction and the compute tasks (sync/ako/ako_internal.h has the map).
#include "sync/ako/ako_internal.h"

#include <cmath>
#include <cstring>

#include "sync/layer_plan.h"
#include "sync/probe/link_probe.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

using namespace ako_internal;

namespace {

std::size_t handoff_slots(std::size_t floats) {
  const std::size_t fit =
      AkoStage::kHandoffBytes / std::max<std::size_t>(1, floats * sizeof(float));
  return std::clamp<std::size_t>(fit, 2, AkoStage::kHandoffSlots);
}

}  // namespace

AkoStage::AkoStage(SyncContext context)
    : ctx_(std::move(context)),
      options_(ako_options(ctx_.options)),
      floats_(ctx_.model.parameter_count()),
      auto_partitions_(!options_.partitions.has_value()),
      clocks_(ctx_.nodes, ctx_.rank),
      router_(ctx_.router),
      partition_lane_(router_.route(
          ako::kPartitionLane,
          [this](std::size_t from, net::Message&& m) { on_message(from, std::move(m)); })),
      control_lane_(router_.route(
          ako::kControlLane,
          [this](std::size_t from, net::Message&& m) { on_message(from, std::move(m)); })),
      full_round_lane_(router_.route(
          ako::kFullRoundLane,
          [this](std::size_t from, net::Message&& m) { on_message(from, std::move(m)); })),
      membership_(ctx_.rank, ctx_.nodes, ctx_.min_nodes),
      joins_(floats_),
      staging_(floats_),
      receiver_(ctx_.nodes, floats_, staging_, clocks_),
      end_(ctx_.rank, ctx_.nodes, floats_) {
  if (ctx_.optimizer.adam()) {  // the job config refuses it first (check_optimizer_keys)
    throw ConfigError(
        "sync.strategy = \"ako\" steps with SGD's rule (its peers' updates, not gradients): "
        "optimizer.algorithm must be \"sgd\"");
  }
  const AkoOptions& o = options_;
  if (auto_partitions_) {
    std::optional<double> measured = ctx_.options.planner.bandwidth;
    if (!measured && ctx_.measured != nullptr) {
      measured = topo::slowest_link(ctx_.measured->links).bandwidth;
    }
    // A rejoining node takes p from its donor (join()): it plans nothing.
    if (ctx_.nodes > 1 && !ctx_.rejoin) bandwidth_ = ako::eq3_bandwidth(o, measured);
  } else {
    bandwidth_ = o.max_send_rate.value_or(o.bandwidth.value_or(0.0));
  }
  if (ctx_.rejoin) bandwidth_ = o.max_send_rate.value_or(o.bandwidth.value_or(bandwidth_));
  link_bandwidth_ = ctx_.options.planner.bandwidth.value_or(
      ctx_.measured != nullptr && ctx_.nodes > 1
          ? topo::slowest_link(ctx_.measured->links).bandwidth
          : bandwidth_);
  if (auto_partitions_ && ctx_.nodes > 1 && bandwidth_ > 0) {
    settle_seconds_ = 2.0 * static_cast<double>(floats_ * sizeof(float)) *
                      static_cast<double>(ctx_.nodes - 1) / bandwidth_;
  }
  // Per rank: B of the link to it as the start-up probe measured (bytes/s); empty: not measured.
  std::vector<double> link_rates;
  if (ctx_.measured != nullptr && ctx_.nodes > 1 &&
      ctx_.measured->links.bandwidth.size() == ctx_.nodes * ctx_.nodes) {
    const auto row = ctx_.measured->links.bandwidth.begin() +
                     static_cast<std::ptrdiff_t>(ctx_.rank * ctx_.nodes);
    link_rates.assign(row, row + static_cast<std::ptrdiff_t>(ctx_.nodes));
    link_rates[ctx_.rank] = 0;
  }
  agreement_.emplace(ctx_.rank, ctx_.nodes, floats_, auto_partitions_, bandwidth_,
                     std::move(link_rates));
  if (ctx_.nodes > 1) handoff_.emplace(floats_, handoff_slots(floats_));
  if (auto_partitions_ && ctx_.nodes > 1) {
    // Warm-up (p = 1) runs under the loosest bound auto p can end with, p_max + tau: unbounded,
    // one node that starts faster ran 900 iterations ahead and then stalled for seconds.
    clocks_.set_slack(static_cast<std::uint64_t>(ako::max_auto_partitions(floats_)) + o.staleness);
  }
  if (!auto_partitions_) {
    const std::size_t p = *o.partitions;
    (void)ako::RangePartition(floats_, p);  // ConfigError for p > m
    spdlog::info("ako: p = {} (sync.ako.partitions), tau = {}, m = {} floats, {} nodes", p,
                 o.staleness, floats_, ctx_.nodes);
    agree(0, p, static_cast<double>(p));
  } else if (ctx_.nodes == 1) {
    for (std::size_t plan = 0; plan < kPlans; ++plan) agree(plan, 1, 1.0);
  }
  if (ctx_.nodes > 1 && o.final_model == AkoFinal::kAverage) {
    const LaneId average_lane =
        router_.route(ako::kAverageLane, [this](std::size_t from, net::Message&& m) {
          average_->on_message(from, std::move(m));  // constructed below, before any message
        });
    // The replicas and the layers' own state (batch normalization's running statistics): the
    // final model is the mean of both.
    average_.emplace(router_, average_lane, 0, floats_ + ctx_.model.layer_state_size());
  }
  if (ctx_.nodes > 1) {
    sender_.emplace(
        ctx_.rank, ctx_.nodes, floats_,
        ako::RoundSender::Lanes{.partition = partition_lane_, .full_round = full_round_lane_},
        kRoundsInFlight, ctx_.executor, router_, *agreement_, membership_, *handoff_,
        [this](const PeerError& error) { on_failure(error); }, [this] { end_.notify(); });
  }
  router_.on_failure([this](const PeerError& error) { on_failure(error); });
  router_.on_rejoin([this](std::size_t peer) { on_rejoin(peer); });
  if (ctx_.rejoin) {
    profiles_sent_ = plans_needed();  // no profile: the donor's p (join())
    failed_.store(true);              // this node failed once: the end is the survivors' mean
  }
  constructed_.store(true, std::memory_order_release);
}

AkoStage::~AkoStage() {
  if (sender_) sender_->stop(false);
}

std::optional<std::size_t> AkoStage::partitions() const {
  const std::size_t needed = plans_needed();
  if (agreement_->agreed() < needed) return std::nullopt;
  return agreement_->partitions(needed - 1);
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
  (void)staging_.apply_to(ctx_.model.parameters());
  // An iteration boundary: the replica holds every update applied so far and nothing runs on it.
  if (joins_.requested()) donate_replica();
}

void AkoStage::step_layer(std::size_t layer) {
  const std::span<float> g = ctx_.model.layer_gradients(layer);
  const std::span<float> w = ctx_.model.layer_parameters(layer);
  const tasks::SgdOptions o = ctx_.optimizer.options();
  // u = (g + wd w) / n: every replica applies every node's u, so lr means what it means for the
  // BSP strategies (a step along the mean of the n nodes' gradients). n counts the live nodes
  // (a failed peer's updates stop coming, sec. 4.3).
  const float inverse_n = 1.0f / static_cast<float>(membership_.live());
  // The decay of each segment (none where optimizer.weight_decay_exclude exempts it).
  ctx_.optimizer.for_each_decay_segment(ctx_.model.parameter_offset(layer), g.size(),
                                        [&](std::size_t b, std::size_t e, float decay) {
                                          for (std::size_t i = b; i < e; ++i)
                                            g[i] = (g[i] + decay * w[i]) * inverse_n;
                                        });
  if (o.momentum == 0.0f) {  // w -= lr u; u is sent (Algorithm 1 lines 5 and 13)
    for (std::size_t i = 0; i < g.size(); ++i) w[i] -= o.lr * g[i];
    return;
  }
  // Momentum: v = mu v + u, w -= lr v, and v is sent in u's place (ako_stage.h).
  const std::size_t offset = ctx_.model.parameter_offset(layer);
  const std::span<float> v = ctx_.optimizer.velocity().subspan(offset, g.size());
  tasks::sgd_update(w.data(), g.data(), v.data(), g.size(),
                    tasks::SgdOptions{o.lr, o.momentum, 0.0f});
  std::copy(v.begin(), v.end(), g.begin());
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
      const std::size_t agreed = agreement_->agreed();
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
      const bool done =
          iterations >= enough && seconds >= (probe ? kProbeSeconds : kProfileSeconds);
      const bool too_long =
          probe && iterations >= kProfileIterations && seconds >= kProbeMaxSeconds;
      if (done || too_long) end_profile(profiles_sent_, profile_gamma());
    }
  }
  post_pump();
}

}  // namespace gradmesh::sync

#include "sync/local/local_stage.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "engine/graph.h"
#include "sync/lane_router.h"
#include "sync/layer_plan.h"
#include "sync/local/messages.h"
#include "sync/plan_input.h"
#include "sync/replica_average.h"
#include "sync/scheme.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

namespace {

constexpr std::uint32_t kDeltaBucket = 0;
constexpr std::uint32_t kFinalBucket = 1;
// The outer exchange's compressor seed, the same on every node (random-k's indices).
constexpr std::uint64_t kOuterSeed = 0x6c6f63616c6f7574ULL;  // "localout"

/// What H the options give or the measurements choose, with the predictions beside it.
LocalSchedule make_schedule(const SyncContext& ctx, const LocalOptions& options,
                            const CompressionOptions& compression) {
  LocalSchedule s;
  const topo::PlannerInput input = planner_input(ctx, {std::string(topo::kAllReduceScheme)});
  const double compute = compute_seconds(input);
  double floats = 0;
  for (const topo::LayerProfile& layer : input.layers)
    floats += static_cast<double>(layer.parameters);
  s.iteration_seconds = compute;
  s.wire = local::outer_exchange_name(compression);
  if (ctx.nodes > 1) {
    const local::OuterCost cost = local::outer_exchange_cost(
        topo::cluster_cost(input), static_cast<std::size_t>(floats), compression);
    s.exchange_seconds = cost.seconds;
    s.bytes_per_exchange = cost.bytes;
  }
  s.automatic = !options.steps.has_value();
  s.steps = options.steps
                ? *options.steps
                : local_steps_for(std::max(compute, 1e-9), s.exchange_seconds, kLocalUtilization,
                                  kMaxLocalSteps, options.overlap != OverlapKind::kOff);
  s.utilization =
      local_utilization(s.steps, compute, s.exchange_seconds, options.overlap != OverlapKind::kOff);
  return s;
}

}  // namespace

std::size_t local_steps_for(double iteration_seconds, double exchange_seconds, double utilization,
                            std::size_t max_steps, bool overlap) {
  GRADMESH_CHECK(std::isfinite(iteration_seconds) && iteration_seconds > 0.0,
                 "local_steps_for: iteration seconds > 0");
  GRADMESH_CHECK(std::isfinite(exchange_seconds) && exchange_seconds >= 0.0,
                 "local_steps_for: exchange seconds >= 0");
  GRADMESH_CHECK(utilization > 0.0 && utilization < 1.0, "local_steps_for: utilization in (0, 1)");
  GRADMESH_CHECK(max_steps >= 1, "local_steps_for: max_steps >= 1");
  // Without overlap H t_c / (H t_c + t_x) >= u; with it H t_c / max(H t_c, t_x) >= u.
  const double factor = overlap ? utilization : utilization / (1.0 - utilization);
  const double needed = std::ceil(factor * exchange_seconds / iteration_seconds - 1e-9);
  if (!(needed < static_cast<double>(max_steps))) return max_steps;
  return std::max<std::size_t>(1, static_cast<std::size_t>(needed));
}

double local_utilization(std::size_t steps, double iteration_seconds, double exchange_seconds,
                         bool overlap) {
  const double busy = static_cast<double>(steps) * iteration_seconds;
  const double round = overlap ? std::max(busy, exchange_seconds) : busy + exchange_seconds;
  return round > 0 ? busy / round : 1.0;
}

LocalStage::LocalStage(SyncContext ctx)
    : ctx_(std::move(ctx)),
      options_(local_options(ctx_.options.values)),
      schedule_(make_schedule(ctx_, options_, compression_options(ctx_.options.values))),
      outer_(options_.outer, options_.outer_lr, options_.outer_momentum,
             ctx_.model.parameter_count()),
      floats_(ctx_.model.parameter_count()) {
  if (ctx_.model.on_device()) {
    throw ConfigError(
        "sync.strategy = \"local\": the outer step runs on host memory; a model on a device "
        "(compute.device = \"cuda\") is not supported by it yet");
  }
  compression_ = compression_options(ctx_.options.values);
  const std::span<const float> w = ctx_.model.parameters();
  start_.assign(w.begin(), w.end());
  delta_.resize(floats_);
  if (overlapped()) round_start_.assign(w.begin(), w.end());
  if (options_.overlap == OverlapKind::kEager) {
    own_.assign(floats_, 0.0f);
    estimate_.resize(floats_);
  }
  if (ctx_.nodes > 1) {
    lane_ = ctx_.router.route(local::kLane, [this](std::size_t from, net::Message&& m) {
      on_message(from, std::move(m));
    });
    exchange_.emplace(ctx_.router, lane_, kDeltaBucket, floats_, compression_, kOuterSeed,
                      ctx_.rank);
    final_.emplace(ctx_.router, lane_, kFinalBucket, floats_ + ctx_.model.layer_state_size());
    ctx_.router.on_failure([this](const PeerError& error) {
      exchange_->fail(error);
      final_->fail_all(std::make_exception_ptr(error));
    });
  }
  const LocalSchedule& s = schedule_;
  spdlog::info(
      "local: H = {} inner steps a round{} (outer {}, lr {}, momentum {}; Delta as a {}{}); "
      "predicted: an iteration {:.2f} ms, the outer exchange {:.2f} ms ({:.0f} bytes a node), "
      "utilization {:.1f}%",
      s.steps,
      s.automatic ? " (sync.local.steps = auto: the smallest H at >= 95% utilization)" : "",
      outer_name(options_.outer), options_.outer_lr, options_.outer_momentum, s.wire,
      overlapped() ? ", overlapped with the next round (" + overlap_name(options_.overlap) +
                         "): the outer step one round late"
                   : std::string(),
      1e3 * s.iteration_seconds, 1e3 * s.exchange_seconds, s.bytes_per_exchange,
      100.0 * s.utilization);
}

void LocalStage::on_message(std::size_t from, net::Message&& message) {
  const std::uint64_t bucket = message.key >> 32;
  if (exchange_->owns(message)) {
    exchange_->on_message(from, std::move(message));
  } else if (message.kind != local::kGatheredKind && bucket == kFinalBucket) {
    final_->on_message(from, std::move(message));
  } else {
    ctx_.router.reject(from, lane_, "bucket " + std::to_string(bucket) + ": not local's");
  }
}

void LocalStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  // Without overlap: the round's exchange starts (local_round), is waited for (local_wait) and
  // applied (local_outer) in its last iteration. With it: the last iteration waits for the
  // previous round's exchange, applies it and starts this round's (local_outer).
  const bool overlap = overlapped();
  auto round =
      graph.emplace("local_round", engine::Arena::kCompute, [this, overlap](engine::TaskContext&) {
        due_ = ++in_round_ >= schedule_.steps;
        if (due_ && !overlap) end_round(exchanges_);
      });
  auto wait =
      graph.emplace("local_wait", engine::Arena::kNetwork, [this, overlap](engine::TaskContext& t) {
        if (!due_ || !exchange_) return;
        if (!overlap) {
          exchange_->await(exchanges_, t.defer());
        } else if (pending_ && !mean_ready_) {
          exchange_->await(exchanges_ - 1, t.defer());
        }
      });
  auto outer =
      graph.emplace("local_outer", engine::Arena::kCompute, [this, overlap](engine::TaskContext&) {
        if (!due_) return;
        if (overlap) {
          end_overlapped_round();
        } else {
          apply_outer(exchanges_++);
        }
        in_round_ = 0;
      });
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    if (ctx_.model.layer(l).parameter_count() == 0) {
      tasks.backward[l].precede(round);
      continue;
    }
    add_local_step(graph, tasks, ctx_, l).precede(round);
  }
  round.precede(wait);
  wait.precede(outer);
  outer.precede(tasks.done);
}

void LocalStage::end_round(std::uint64_t exchange) {
  const std::span<const float> w = ctx_.model.parameters();
  for (std::size_t i = 0; i < floats_; ++i) delta_[i] = start_[i] - w[i];
  if (exchange_) exchange_->start(exchange, delta_);
}

void LocalStage::apply_outer(std::uint64_t exchange) {
  if (exchange_) exchange_->mean(exchange, ctx_.nodes, delta_);
  outer_.step(start_, delta_);
  const std::span<float> w = ctx_.model.parameters();
  std::copy(start_.begin(), start_.end(), w.begin());
}

void LocalStage::end_overlapped_round() {
  const std::span<float> w = ctx_.model.parameters();
  if (options_.overlap == OverlapKind::kEager) {
    // Delta~ = Delta_r / n + (mean Delta_{r-1} - own Delta_{r-1} / n): this node's fresh change
    // and the others' changes of the round before, each applied once (the others' are 0 in the
    // first round; one node: Delta~ = Delta_r). delta_ holds mean Delta_{r-1} (when pending_)
    // until each float is overwritten by Delta_r.
    if (pending_ && !mean_ready_) exchange_->mean(exchanges_ - 1, ctx_.nodes, delta_);
    const bool alone = ctx_.nodes == 1;
    const float inv_nodes = 1.0f / static_cast<float>(ctx_.nodes);
    for (std::size_t i = 0; i < floats_; ++i) {
      const float d = round_start_[i] - w[i];
      const float others = pending_ ? delta_[i] - own_[i] * inv_nodes : 0.0f;
      estimate_[i] = alone ? d : d * inv_nodes + others;
      own_[i] = d;
      delta_[i] = d;
    }
    outer_.step(round_start_, estimate_);  // this node's own outer step
    std::copy(round_start_.begin(), round_start_.end(), w.begin());
  } else {
    // g_{r-1} = outer(g_{r-2}, mean Delta_{r-1}); Delta_r taken from the round's start; every
    // replica goes on from g_{r-1}.
    if (pending_) {
      if (!mean_ready_) exchange_->mean(exchanges_ - 1, ctx_.nodes, delta_);
      outer_.step(start_, delta_);
    }
    for (std::size_t i = 0; i < floats_; ++i) {
      delta_[i] = round_start_[i] - w[i];
      w[i] = start_[i];
      round_start_[i] = start_[i];
    }
  }
  if (exchange_) exchange_->start(exchanges_, delta_);
  ++exchanges_;
  pending_ = true;
  mean_ready_ = !exchange_;  // one node: its Delta is the mean
}

void LocalStage::drain() {
  if (!pending_ || mean_ready_) return;
  engine::Graph graph;
  graph.emplace("local_drain", engine::Arena::kNetwork,
                [this](engine::TaskContext& t) { exchange_->await(exchanges_ - 1, t.defer()); });
  ctx_.executor.run(graph);  // rethrows a peer's failure (PeerError)
  exchange_->mean(exchanges_ - 1, ctx_.nodes, delta_);
  mean_ready_ = true;
}

std::vector<LayerPlan> LocalStage::plan() const {
  std::vector<LayerPlan> rows;
  const std::string scheme =
      "local H=" + std::to_string(schedule_.steps) + ", " + outer_name(options_.outer) +
      (compression_.compresses() ? ", " + schedule_.wire : std::string()) +
      (overlapped() ? ", overlap " + overlap_name(options_.overlap) : std::string());
  const double per_float = floats_ > 0
                               ? schedule_.bytes_per_exchange / static_cast<double>(floats_) /
                                     static_cast<double>(schedule_.steps)
                               : 0.0;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    LayerPlan row = describe_layer(ctx_.model, l, scheme);
    if (row.parameters == 0) row.scheme = "local";
    row.predicted_bytes_sent = per_float * static_cast<double>(row.parameters);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::map<std::string, double> LocalStage::summary() const {
  const LocalSchedule& s = schedule_;
  return {{"local_steps", static_cast<double>(s.steps)},
          {"local_auto", s.automatic ? 1.0 : 0.0},
          {"local_overlap", static_cast<double>(options_.overlap)},
          {"local_iteration_seconds", s.iteration_seconds},
          {"local_exchange_seconds", s.exchange_seconds},
          {"local_predicted_utilization", s.utilization},
          {"predicted_bytes_sent", s.bytes_per_exchange / static_cast<double>(s.steps)}};
}

bool LocalStage::finish() {
  // Overlap: the exchange in flight is waited for (no message is left behind) but not applied:
  // an outer step on it, with nothing to train after it, made the final model worse than the
  // replicas it came from (docs/measured.md, "local with overlap"); the final model is the
  // replicas' mean. Eager's replicas differ even at a round's end (each node's own steps).
  const bool replicas_differ = options_.overlap == OverlapKind::kEager && ctx_.nodes > 1;
  if (overlapped() && pending_) {
    drain();
    pending_ = false;
    mean_ready_ = false;
  }
  const bool mid_round = in_round_ > 0 || replicas_differ;
  const std::size_t states = ctx_.model.layer_state_size();
  if (!final_ || (!mid_round && states == 0)) return false;
  // One ring of the replica and the layers' own state: their means are the final model (the
  // replicas are already equal at a round's end: then only the states are written back).
  ReplicaAverage replicas(ctx_.model);
  replicas.reduce(ctx_.executor, *final_, "local_final");
  replicas.write_back(*final_, ctx_.nodes, mid_round);
  if (in_round_ > 0) {
    spdlog::info(
        "local: the job ended {} inner steps into a round: the final model is the mean "
        "of the {} replicas",
        in_round_, ctx_.nodes);
  } else if (replicas_differ) {
    spdlog::info(
        "local: each node's eager outer steps took its own estimate: the final model is the "
        "mean of the {} replicas",
        ctx_.nodes);
  }
  return true;
}

void LocalStage::save_state(engine::StateWriter& out) {
  out.write_u64(schedule_.steps);
  out.write_u64(in_round_);
  out.write_floats(start_);
  outer_.save_state(out);
  engine::Checkpointable* residual = exchange_ ? exchange_->residual() : nullptr;
  out.write_u64(residual != nullptr ? 1 : 0);
  if (residual != nullptr) residual->save_state(out);
  out.write_u64(static_cast<std::uint64_t>(options_.overlap));
  if (overlapped()) {
    drain();  // the exchange in flight is saved as its mean
    out.write_floats(round_start_);
    out.write_u64(pending_ ? 1 : 0);
    if (pending_) out.write_floats(delta_);
    if (options_.overlap == OverlapKind::kEager) out.write_floats(own_);
  }
}

void LocalStage::load_state(engine::StateReader& in) {
  const std::uint64_t steps = in.read_u64();
  const std::uint64_t in_round = in.read_u64();
  if (steps != schedule_.steps) {
    throw CheckpointError(
        "sync.local: the checkpoint's rounds are of H = " + std::to_string(steps) +
        " inner steps, this job's of " + std::to_string(schedule_.steps) +
        " (set sync.local.steps = " + std::to_string(steps) + " to resume it)");
  }
  if (in_round >= steps) throw CheckpointError("sync.local: inner steps past the round's end");
  in.read_floats(start_);
  outer_.load_state(in);
  engine::Checkpointable* residual = exchange_ ? exchange_->residual() : nullptr;
  if ((in.read_u64() != 0) != (residual != nullptr)) {
    throw CheckpointError("sync.local: the checkpoint's outer exchange " +
                          std::string(residual != nullptr ? "kept no" : "kept an") +
                          " error-feedback residual, this job's " + schedule_.wire +
                          (residual != nullptr ? " needs one" : " none") +
                          " (resume with the sync.compression.method it was written with)");
  }
  if (residual != nullptr) residual->load_state(in);
  const std::uint64_t overlap = in.read_u64();
  if (overlap != static_cast<std::uint64_t>(options_.overlap)) {
    throw CheckpointError(
        "sync.local: the checkpoint was written with sync.local.overlap = \"" +
        (overlap <= 2 ? overlap_name(static_cast<OverlapKind>(overlap)) : std::string("?")) +
        "\", this job has \"" + overlap_name(options_.overlap) + "\"");
  }
  if (overlapped()) {
    in.read_floats(round_start_);
    pending_ = in.read_u64() != 0;
    if (pending_) in.read_floats(delta_);
    mean_ready_ = pending_;
    if (options_.overlap == OverlapKind::kEager) in.read_floats(own_);
  }
  in_round_ = static_cast<std::size_t>(in_round);
}

}  // namespace gradmesh::sync

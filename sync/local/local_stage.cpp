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

}  // namespace

LocalStage::LocalStage(SyncContext ctx)
    : ctx_(std::move(ctx)),
      options_(local_options(ctx_.options.values)),
      schedule_(make_local_schedule(ctx_, options_, compression_options(ctx_.options.values))),
      floats_(ctx_.model.parameter_count()) {
  if (ctx_.model.on_device()) {
    throw ConfigError(
        "sync.strategy = \"local\": the outer step runs on host memory; a model on a device "
        "(compute.device = \"cuda\") is not supported by it yet");
  }
  const std::size_t f_count = options_.fragments;
  if (f_count > schedule_.steps || f_count > std::max<std::size_t>(floats_, 1) ||
      f_count > kMaxLocalFragments) {
    throw ConfigError("sync.local.fragments = " + std::to_string(f_count) +
                      ": at most H = " + std::to_string(schedule_.steps) +
                      " (sync.local.steps), the model's " + std::to_string(floats_) +
                      " parameters and " + std::to_string(kMaxLocalFragments) +
                      ", one exchange point a fragment in each round");
  }
  if (f_count > 1 && options_.overlap == OverlapKind::kEager) {
    throw ConfigError(
        "sync.local.fragments = " + std::to_string(f_count) +
        " with sync.local.overlap = \"eager\": eager updates are one exchange of the whole "
        "model a round; use overlap \"delayed\" (each fragment's exchange overlaps the inner "
        "steps up to the next fragment's) or \"off\"");
  }
  compression_ = compression_options(ctx_.options.values);
  if (options_.quorum && ctx_.nodes > 1) {
    const std::string key = "sync.local.quorum = " + std::to_string(*options_.quorum);
    if (*options_.quorum > ctx_.nodes) {
      throw ConfigError(key + ": more than the job's " + std::to_string(ctx_.nodes) + " nodes");
    }
    if (f_count > 1 || overlapped() || compression_.compresses()) {
      throw ConfigError(key +
                        ": quorum rounds exchange the whole model uncompressed at a "
                        "round's end; they take no sync.local.fragments, "
                        "sync.local.overlap or sync.compression yet");
    }
  }
  const std::span<const float> w = ctx_.model.parameters();
  start_.assign(w.begin(), w.end());
  delta_.resize(floats_);
  if (overlapped()) {
    round_start_.assign(w.begin(), w.end());
    estimate_.resize(floats_);
  }
  if (options_.overlap == OverlapKind::kEager) own_.assign(floats_, 0.0f);
  for (std::size_t p = 0; p < f_count; ++p) {
    fragments_.emplace_back(p * floats_ / f_count, (p + 1) * floats_ / f_count,
                            (p + 1) * schedule_.steps / f_count, options_);
  }
  if (ctx_.nodes > 1 && options_.quorum) {
    lane_ = ctx_.router.route(local::kLane, [this](std::size_t from, net::Message&& m) {
      on_message(from, std::move(m));
    });
    quorum_.emplace(ctx_.router, lane_, ctx_.rank, ctx_.nodes, *options_.quorum, ctx_.min_nodes,
                    start_, ctx_.model.layer_state_size(), fragments_[0].outer);
    ctx_.router.on_failure([this](const PeerError& error) { quorum_->on_failure(error); });
    ctx_.router.on_rejoin([this](std::size_t peer) { quorum_->on_rejoin(peer); });
  } else if (ctx_.nodes > 1) {
    lane_ = ctx_.router.route(local::kLane, [this](std::size_t from, net::Message&& m) {
      on_message(from, std::move(m));
    });
    for (std::size_t p = 0; p < f_count; ++p) {
      Fragment& f = fragments_[p];
      // Fragment 0 on bucket 0 and the first gathered kind; bucket 1 is the final average's.
      f.exchange.emplace(ctx_.router, lane_,
                         p == 0 ? kDeltaBucket : kFinalBucket + static_cast<std::uint32_t>(p),
                         f.end - f.begin, compression_, kOuterSeed + p, ctx_.rank,
                         static_cast<std::uint16_t>(local::kGatheredKind + p));
    }
    final_.emplace(ctx_.router, lane_, kFinalBucket, floats_ + ctx_.model.layer_state_size());
    ctx_.router.on_failure([this](const PeerError& error) {
      for (Fragment& f : fragments_) f.exchange->fail(error);
      final_->fail_all(std::make_exception_ptr(error));
    });
  }
  const LocalSchedule& s = schedule_;
  spdlog::info(
      "local: H = {} inner steps a round{} (outer {}, lr {}, momentum {}; Delta as a {}{}{}); "
      "predicted: an iteration {:.2f} ms, the outer exchange {:.2f} ms ({:.0f} bytes a node), "
      "utilization {:.1f}%",
      s.steps,
      s.automatic ? " (sync.local.steps = auto: the smallest H at >= 95% utilization)" : "",
      outer_name(options_.outer), options_.outer_lr, options_.outer_momentum, s.wire,
      f_count > 1 ? ", in " + std::to_string(f_count) + " fragments at staggered steps"
                  : std::string(),
      overlapped() ? std::string(", overlapped with the next ") +
                         (f_count > 1 ? "fragment's steps" : "round") + " (" +
                         overlap_name(options_.overlap) + "): the outer step late"
                   : std::string(),
      1e3 * s.iteration_seconds, 1e3 * s.exchange_seconds, s.bytes_per_exchange,
      100.0 * s.utilization);
}

void LocalStage::on_message(std::size_t from, net::Message&& message) {
  const std::uint64_t bucket = message.key >> 32;
  if (quorum_) {
    quorum_->on_message(from, std::move(message));  // rejects every other kind
    return;
  }
  for (Fragment& f : fragments_) {
    if (f.exchange->owns(message)) {
      f.exchange->on_message(from, std::move(message));
      return;
    }
  }
  if (message.kind < local::kGatheredKind && bucket == kFinalBucket) {
    final_->on_message(from, std::move(message));
  } else {
    ctx_.router.reject(from, lane_,
                       "bucket " + std::to_string(bucket) + ", kind " +
                           std::to_string(message.kind) + ": not local's");
  }
}

void LocalStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  // Without overlap: at a fragment's point its exchange starts (local_round), is waited for
  // (local_wait) and applied (local_outer). With it: the point waits for the previous
  // fragment's exchange (the previous round's, F = 1), applies it and starts this fragment's
  // (local_outer).
  const bool overlap = overlapped();
  auto round =
      graph.emplace("local_round", engine::Arena::kCompute, [this, overlap](engine::TaskContext&) {
        ++in_round_;
        due_ = kNone;
        for (std::size_t p = 0; p < fragments_.size(); ++p) {
          if (fragments_[p].sync_step == in_round_) due_ = p;
        }
        if (quorum_) {
          quorum_->note_iteration(++iterations_);
          if (due_ != kNone) {
            const std::span<const float> w = ctx_.model.parameters();
            for (std::size_t i = 0; i < floats_; ++i) delta_[i] = start_[i] - w[i];
            quorum_->contribute(delta_);
          }
          return;
        }
        if (due_ != kNone && !overlap) start_exchange(fragments_[due_]);
      });
  auto wait =
      graph.emplace("local_wait", engine::Arena::kNetwork, [this, overlap](engine::TaskContext& t) {
        if (due_ == kNone || ctx_.nodes < 2) return;
        if (quorum_) {
          quorum_->await(t.defer());
          return;
        }
        if (!overlap) {
          Fragment& f = fragments_[due_];
          f.exchange->await(f.exchanges, t.defer());
          return;
        }
        Fragment& before = fragments_[previous(due_)];
        if (before.pending && !before.mean_ready) {
          before.exchange->await(before.exchanges - 1, t.defer());
        }
      });
  auto outer =
      graph.emplace("local_outer", engine::Arena::kCompute, [this, overlap](engine::TaskContext&) {
        if (due_ == kNone) return;
        if (quorum_) {
          // Go on from the newest global model (this node's Delta in it, or in the next merge).
          const std::span<float> w = ctx_.model.parameters();
          quorum_->adopt(w);
          std::copy(w.begin(), w.end(), start_.begin());
        } else if (overlap) {
          end_overlapped(due_);
        } else {
          apply_outer(fragments_[due_]);
        }
        if (in_round_ >= schedule_.steps) in_round_ = 0;
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

void LocalStage::start_exchange(Fragment& f) {
  const std::span<const float> w = ctx_.model.parameters();
  for (std::size_t i = f.begin; i < f.end; ++i) delta_[i] = start_[i] - w[i];
  if (f.exchange)
    f.exchange->start(f.exchanges, std::span(delta_).subspan(f.begin, f.end - f.begin));
}

void LocalStage::apply_outer(Fragment& f) {
  const std::size_t size = f.end - f.begin;
  const std::span<float> delta = std::span(delta_).subspan(f.begin, size);
  if (f.exchange) f.exchange->mean(f.exchanges, ctx_.nodes, delta);
  ++f.exchanges;
  f.outer.step(std::span(start_).subspan(f.begin, size), delta);
  const std::span<float> w = ctx_.model.parameters();
  std::copy(start_.begin() + static_cast<std::ptrdiff_t>(f.begin),
            start_.begin() + static_cast<std::ptrdiff_t>(f.end),
            w.begin() + static_cast<std::ptrdiff_t>(f.begin));
}

void LocalStage::end_overlapped(std::size_t index) {
  const std::span<float> w = ctx_.model.parameters();
  Fragment& f = fragments_[index];
  const auto slice = [&](std::vector<float>& v, const Fragment& of) {
    return std::span(v).subspan(of.begin, of.end - of.begin);
  };
  if (options_.overlap == OverlapKind::kEager) {
    // (F = 1.) Delta~ = Delta_r / n + (mean Delta_{r-1} - own Delta_{r-1} / n): this node's
    // fresh change and the others' changes of the round before, each applied once (the others'
    // are 0 in the first round; one node: Delta~ = Delta_r). delta_ holds mean Delta_{r-1}
    // (when pending) until each float is overwritten by Delta_r.
    if (f.pending && !f.mean_ready) f.exchange->mean(f.exchanges - 1, ctx_.nodes, delta_);
    const bool alone = ctx_.nodes == 1;
    const float inv_nodes = 1.0f / static_cast<float>(ctx_.nodes);
    for (std::size_t i = 0; i < floats_; ++i) {
      const float d = round_start_[i] - w[i];
      const float others = f.pending ? delta_[i] - own_[i] * inv_nodes : 0.0f;
      estimate_[i] = alone ? d : d * inv_nodes + others;
      own_[i] = d;
      delta_[i] = d;
    }
    f.outer.step(round_start_, estimate_);  // this node's own outer step
    std::copy(round_start_.begin(), round_start_.end(), w.begin());
  } else {
    // Delayed: the fragment before this one (this one, F = 1) takes its pending outer step,
    // g' = outer(g, mean Delta); with F > 1 the node's copy of it and its round start both move
    // by g' - g (the inner steps since that exchange began are kept; F = 1 overwrites both
    // next, so no move). Then this fragment's Delta is taken and its replica goes on from g.
    Fragment& before = fragments_[previous(index)];
    if (before.pending) {
      const std::span<float> mean = slice(delta_, before);
      if (!before.mean_ready) before.exchange->mean(before.exchanges - 1, ctx_.nodes, mean);
      const std::span<float> g = slice(start_, before);
      const bool move = &before != &f;
      if (move) std::copy(g.begin(), g.end(), estimate_.begin());
      before.outer.step(g, mean);
      if (move) {
        for (std::size_t k = 0; k < g.size(); ++k) {
          const float shift = g[k] - estimate_[k];
          w[before.begin + k] += shift;
          round_start_[before.begin + k] += shift;
        }
      }
      before.pending = false;
    }
    for (std::size_t i = f.begin; i < f.end; ++i) {
      delta_[i] = round_start_[i] - w[i];
      w[i] = start_[i];
      round_start_[i] = start_[i];
    }
  }
  if (f.exchange) f.exchange->start(f.exchanges, slice(delta_, f));
  ++f.exchanges;
  f.pending = true;
  f.mean_ready = !f.exchange;  // one node: its Delta is the mean
}

void LocalStage::drain() {
  engine::Graph graph;
  bool waiting = false;
  for (Fragment& f : fragments_) {
    if (!f.pending || f.mean_ready) continue;
    waiting = true;
    graph.emplace("local_drain", engine::Arena::kNetwork,
                  [&f](engine::TaskContext& t) { f.exchange->await(f.exchanges - 1, t.defer()); });
  }
  if (!waiting) return;
  ctx_.executor.run(graph);  // rethrows a peer's failure (PeerError)
  for (Fragment& f : fragments_) {
    if (!f.pending || f.mean_ready) continue;
    f.exchange->mean(f.exchanges - 1, ctx_.nodes,
                     std::span(delta_).subspan(f.begin, f.end - f.begin));
    f.mean_ready = true;
  }
}

std::vector<LayerPlan> LocalStage::plan() const {
  std::vector<LayerPlan> rows;
  const std::string scheme =
      "local H=" + std::to_string(schedule_.steps) + ", " + outer_name(options_.outer) +
      (compression_.compresses() || quorum_ ? ", " + schedule_.wire : std::string()) +
      (overlapped() ? ", overlap " + overlap_name(options_.overlap) : std::string()) +
      (fragments_.size() > 1 ? ", " + std::to_string(fragments_.size()) + " fragments"
                             : std::string());
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
  std::map<std::string, double> out = {
      {"local_steps", static_cast<double>(s.steps)},
      {"local_auto", s.automatic ? 1.0 : 0.0},
      {"local_overlap", static_cast<double>(options_.overlap)},
      {"local_fragments", static_cast<double>(s.fragments)},
      {"local_iteration_seconds", s.iteration_seconds},
      {"local_exchange_seconds", s.exchange_seconds},
      {"local_predicted_utilization", s.utilization},
      {"predicted_bytes_sent", s.bytes_per_exchange / static_cast<double>(s.steps)}};
  if (s.inter_site_bytes > 0)  // sites: simulate --links
    out["predicted_inter_site_bytes"] = s.inter_site_bytes / static_cast<double>(s.steps);
  if (quorum_) {
    // The leader's merges (zeros on the other nodes), and the peers this node dropped.
    const local::QuorumFigures f = quorum_->figures();
    out["local_quorum"] = static_cast<double>(*options_.quorum);
    out["local_merges"] = static_cast<double>(f.merges);
    out["local_partial_merges"] = static_cast<double>(f.partial_merges);
    out["local_merged_deltas"] = static_cast<double>(f.contributions);
    out["local_final_deltas"] = static_cast<double>(f.final_deltas);
    out["local_stale_deltas"] = static_cast<double>(f.stale);
    out["local_max_staleness"] = static_cast<double>(f.max_staleness);
    out["local_mean_staleness"] = f.contributions > 0 ? static_cast<double>(f.staleness_sum) /
                                                            static_cast<double>(f.contributions)
                                                      : 0.0;
    out["peers_failed"] = static_cast<double>(quorum_->failures());
  }
  return out;
}

std::uint64_t LocalStage::join() {
  if (!quorum_) return SyncStage::join();  // refuses: a rejoin comes through checkpoints
  // The leader's newest global model, and its iterations done: the round starts there.
  const std::span<float> w = ctx_.model.parameters();
  iterations_ = quorum_->join(w, kJoinTimeoutSeconds);
  std::copy(w.begin(), w.end(), start_.begin());
  in_round_ = 0;
  return iterations_;
}

std::string LocalStage::checkpoint_refusal() const {
  if (!quorum_) return {};
  return "sync.local.quorum = " + std::to_string(*options_.quorum) +
         ": quorum rounds keep no checkpoints yet (between merges each node holds its own "
         "version of the global model); a failed peer other than rank 0 is survived without "
         "them";
}

bool LocalStage::finish() {
  if (quorum_) {
    // Every node's change not yet merged, and the layer states, averaged by the leader.
    const std::span<float> w = ctx_.model.parameters();
    for (std::size_t i = 0; i < floats_; ++i) delta_[i] = start_[i] - w[i];
    std::vector<float> states(ctx_.model.layer_state_size());
    ctx_.model.save_layer_states(states);
    quorum_->finish(delta_, w, states);
    if (!states.empty()) ctx_.model.load_layer_states(states);
    return true;
  }
  // Overlap: the exchanges in flight are waited for (no message is left behind) but not
  // applied: an outer step on them, with nothing to train after it, made the final model worse
  // than the replicas it came from (docs/measured.md, "local with overlap"); the final model is
  // the replicas' mean. Eager's replicas differ even at a round's end (each node's own steps),
  // and so do fragments' (each fragment agrees only right after its own exchange).
  const bool fragmented = fragments_.size() > 1;
  const bool replicas_differ =
      ctx_.nodes > 1 && (options_.overlap == OverlapKind::kEager || fragmented);
  if (overlapped()) {
    drain();
    for (Fragment& f : fragments_) f.pending = f.mean_ready = false;
  }
  const bool mid_round = in_round_ > 0 || replicas_differ;
  const std::size_t states = ctx_.model.layer_state_size();
  if (!final_ || (!mid_round && states == 0)) return false;
  if (compression_.compresses() && in_round_ > 0 && !overlapped() && !replicas_differ &&
      states == 0) {
    finish_compressed();
    return true;
  }
  // One ring of the replica and the layers' own state: their means are the final model (the
  // replicas are already equal at a round's end: then only the states are written back).
  ReplicaAverage replicas(ctx_.model);
  replicas.reduce(ctx_.executor, *final_, "local_final");
  replicas.write_back(*final_, ctx_.nodes, mid_round);
  if (replicas_differ) {
    spdlog::info("local: {}: the final model is the mean of the {} replicas",
                 fragmented ? "the fragments were exchanged at staggered steps"
                            : "each node's eager outer steps took its own estimate",
                 ctx_.nodes);
  } else if (in_round_ > 0) {
    spdlog::info(
        "local: the job ended {} inner steps into a round: the final model is the mean "
        "of the {} replicas",
        in_round_, ctx_.nodes);
  }
  return true;
}

void LocalStage::finish_compressed() {
  // Every replica started the round from theta_round_start, so their mean is theta_round_start
  // less the mean Delta: the round's exchange (its compressor, its error-feedback residual) gives
  // it at a round's cost, where the float ring of the replicas costs 2 (n - 1) / n 4 m bytes a
  // node (at 1 Mbit/s, the large MLP's 120 MB: 17 minutes; in fp16 half).
  Fragment& f = fragments_[0];
  start_exchange(f);
  engine::Graph graph;
  graph.emplace("local_final", engine::Arena::kNetwork,
                [&f](engine::TaskContext& t) { f.exchange->await(f.exchanges, t.defer()); });
  ctx_.executor.run(graph);  // rethrows a peer's failure (PeerError)
  f.exchange->mean(f.exchanges, ctx_.nodes, delta_);
  ++f.exchanges;
  const std::span<float> w = ctx_.model.parameters();
  for (std::size_t i = 0; i < floats_; ++i) w[i] = start_[i] - delta_[i];
  std::copy(w.begin(), w.end(), start_.begin());
  spdlog::info(
      "local: the job ended {} inner steps into a round: the final model is the mean of the {} "
      "replicas, from their changes sent as a round's ({})",
      in_round_, ctx_.nodes, schedule_.wire);
}

}  // namespace gradmesh::sync

#include "topo/planner.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "topo/input_check.h"
#include "topo/kv_placement.h"
#include "topo/merge_planner.h"

namespace gradmesh::topo {

namespace {

constexpr double kFloatBytes = sizeof(float);

std::string layer_label(const PlannerInput& input, std::size_t l) {
  return "layer " + std::to_string(l) + " (" + input.layers[l].name + ") ";
}

void check_input(const PlannerInput& input) {
  detail::require(input.fixed_schemes.empty() || input.fixed_schemes.size() == input.layers.size(),
                  "fixed schemes", input.fixed_schemes.size(),
                  "none or one per layer (" + std::to_string(input.layers.size()) + ")");
  detail::require(input.nodes >= 1, "nodes n", input.nodes, ">= 1");
  detail::require(input.links.nodes == input.nodes, "nodes of the link matrix", input.links.nodes,
                  "n = " + std::to_string(input.nodes));
  detail::require(input.batch >= 1, "batch K", input.batch, ">= 1");
  detail::require(detail::finite_non_negative(input.frame_overhead_bytes), "frame overhead (bytes)",
                  input.frame_overhead_bytes, "a finite number >= 0");
  detail::require(detail::finite_non_negative(input.transport_seconds_per_byte),
                  "transport work per byte (seconds)", input.transport_seconds_per_byte,
                  "a finite number >= 0");
  for (std::size_t l = 0; l < input.layers.size(); ++l) {
    const LayerProfile& layer = input.layers[l];
    const std::string label = layer_label(input, l);
    detail::require(detail::finite_non_negative(layer.forward_seconds), label + "t_f (seconds)",
                    layer.forward_seconds, "a finite number >= 0");
    detail::require(detail::finite_non_negative(layer.backward_seconds), label + "t_b (seconds)",
                    layer.backward_seconds, "a finite number >= 0");
    if (layer.backward_input_seconds) {
      detail::require(detail::finite_non_negative(*layer.backward_input_seconds),
                      label + "t_b without dW (seconds)", *layer.backward_input_seconds,
                      "a finite number >= 0");
    }
    if (layer.sufficient_factors) {
      detail::require(layer.rows >= 1 && layer.cols >= 1, label + "rows x cols",
                      std::to_string(layer.rows) + " x " + std::to_string(layer.cols),
                      "at least 1 x 1 for sufficient factors");
      detail::require(
          layer.parameters == layer.rows * layer.cols + layer.rows, label + "parameters",
          layer.parameters,
          "rows x cols + rows = " + std::to_string(layer.rows * layer.cols + layer.rows));
    }
  }
}

/// The allowed model of scheme `id` (nullptr for kLocalScheme or an id not allowed).
const SchemeModel* model_of(const PlannerInput& input, std::string_view id) {
  for (const SchemeModel& m : input.schemes) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

bool fits(const SchemeModel& model, const LayerProfile& layer) {
  return layer.parameters > 0 && (!model.fits || model.fits(layer));
}

const SchemeModel* bucketed_model(const PlannerInput& input) {
  for (const SchemeModel& m : input.schemes) {
    if (m.bucketed) return &m;
  }
  return nullptr;
}

std::string allowed_ids(const PlannerInput& input) {
  std::string out;
  for (const SchemeModel& m : input.schemes) out += (out.empty() ? "" : ", ") + m.id;
  return out.empty() ? "none" : out;
}

void check_schemes(const PlannerInput& input) {
  for (std::size_t i = 0; i < input.schemes.size(); ++i) {
    const SchemeModel& m = input.schemes[i];
    detail::require(!m.id.empty() && m.id != kLocalScheme && model_of(input, m.id) == &m,
                    "scheme id", "'" + m.id + "'", "a unique id other than 'local'");
    detail::require(static_cast<bool>(m.cost), "scheme " + m.id + "'s cost function", "none",
                    "one");
  }
  if (input.nodes == 1) return;  // every layer is local: fixed schemes are ignored
  for (std::size_t l = 0; l < input.fixed_schemes.size(); ++l) {
    if (!input.fixed_schemes[l] || input.layers[l].parameters == 0) continue;
    const SchemeModel* m = model_of(input, *input.fixed_schemes[l]);
    detail::require(m != nullptr && fits(*m, input.layers[l]),
                    layer_label(input, l) + "fixed scheme", *input.fixed_schemes[l],
                    "an allowed scheme (" + allowed_ids(input) + ") that fits the layer");
  }
}

std::size_t chunk_floats_for(const PlannerInput& input, std::size_t chunked_floats) {
  if (input.kv_chunk_bytes) return std::max<std::size_t>(1, *input.kv_chunk_bytes / sizeof(float));
  return KvPlacement::auto_chunk_floats(chunked_floats, input.nodes);
}

/// The transport's work on the cores for `bytes_sent` bytes a node sends and as many it receives
/// (every scheme's exchange is symmetric), seconds.
double transport_seconds(const ClusterCost& cluster, double bytes_sent) {
  return 2.0 * bytes_sent * cluster.transport_seconds_per_byte;
}

/// `model`'s cost of `layer` with the transport's work on its bytes.
SchemeCost cost_of(const SchemeModel& model, const SchemeCostInput& in, const LayerProfile& layer) {
  SchemeCost cost = model.cost(in, layer);
  cost.transport_seconds = transport_seconds(in.cluster, cost.bytes_sent);
  return cost;
}

/// The layer's time alone under `model`: its cost, less the dW time its backward skips (SFB).
double seconds_alone(const SchemeModel& model, const SchemeCost& cost, const LayerProfile& layer) {
  const double saved = model.skips_parameter_gradients
                           ? layer.backward_seconds - layer.backward_seconds_under(true)
                           : 0.0;
  return cost.seconds() - saved;
}

/// The scheme of layer `l` chosen on its own (n > 1, parameters > 0): the least time alone.
std::string choose_scheme(const PlannerInput& input, const ClusterCost& cluster, std::size_t l,
                          std::size_t chunk_floats) {
  const LayerProfile& layer = input.layers[l];
  const SchemeCostInput in{cluster, input.batch, chunk_floats};
  const SchemeModel* best = nullptr;
  double best_seconds = 0;
  for (const SchemeModel& m : input.schemes) {
    if (!fits(m, layer)) continue;
    const double seconds = seconds_alone(m, cost_of(m, in, layer), layer);
    if (best == nullptr || seconds < best_seconds) {
      best = &m;
      best_seconds = seconds;
    }
  }
  detail::require(best != nullptr, layer_label(input, l) + "schemes allowed", allowed_ids(input),
                  "one that fits the layer (SFB needs sufficient factors)");
  return best->id;
}

/// How the transport shares the link among `plan`'s layers (merge_planner.h): a traffic class
/// per lane a scheme sends on first (a PS layer's push and broadcast, each with half its bytes,
/// go one after the other: its push lane's weight is its share), weighted by the plan's bytes on
/// that lane (net::Transport::set_lane_weights gets plan.lane_bytes; the buckets' bytes here
/// without their frame headers, which evaluate() adds once the buckets are known). Sets each
/// pipeline layer's traffic_class.
LinkSharing link_sharing(const PlannerInput& input, const std::vector<std::string>& schemes,
                         const Plan& plan, std::vector<WfbpLayer>& pipeline) {
  std::map<std::string, double, std::less<>> lane_bytes = plan.lane_bytes;
  std::vector<std::string> lanes;  // class c's lane
  LinkSharing sharing;
  for (std::size_t l = 0; l < schemes.size(); ++l) {
    const SchemeModel* model = model_of(input, schemes[l]);
    if (model == nullptr || model->lanes.empty()) continue;
    const std::string& lane = model->lanes.front().first;
    if (model->bucketed)
      lane_bytes[lane] += ring_allreduce_bytes(pipeline[l].allreduce_bytes, input.nodes);
    const auto it = std::find(lanes.begin(), lanes.end(), lane);
    pipeline[l].traffic_class = static_cast<std::size_t>(it - lanes.begin());
    if (it == lanes.end()) lanes.push_back(lane);
  }
  for (const std::string& lane : lanes) {
    // A lane's bytes, at least one (a scheme whose layers send only latency, e.g. tiny ones).
    sharing.class_weights.push_back(std::max(lane_bytes[lane], 1.0));
  }
  return sharing;
}

/// The plan for given per-layer schemes: chunks, costs, buckets, timeline, budgets.
Plan evaluate(const PlannerInput& input, const ClusterCost& cluster,
              const std::vector<std::string>& schemes) {
  Plan plan;
  plan.link = cluster.link;
  plan.allreduce = ring_allreduce_cost(cluster.link, cluster.nodes, cluster.frame_overhead_bytes);
  std::size_t chunked_floats = 0;
  for (std::size_t l = 0; l < schemes.size(); ++l) {
    const SchemeModel* m = model_of(input, schemes[l]);
    if (m != nullptr && m->chunked) chunked_floats += input.layers[l].parameters;
  }
  plan.kv_chunk_floats = chunk_floats_for(input, chunked_floats);
  const SchemeCostInput cost_input{cluster, input.batch, plan.kv_chunk_floats};

  std::vector<WfbpLayer> pipeline(input.layers.size());
  std::vector<double> bucket_bytes(input.layers.size(), 0.0);  // a bucketed layer's payload
  const SchemeModel* bucketed = nullptr;
  for (std::size_t l = 0; l < input.layers.size(); ++l) {
    const LayerProfile& layer = input.layers[l];
    PlannedLayer& row = plan.layers.emplace_back();
    row.layer = l;
    row.name = layer.name;
    row.scheme = schemes[l];
    row.parameters = layer.parameters;
    const SchemeModel* model = model_of(input, row.scheme);
    plan.forward_seconds += layer.forward_seconds;
    const double backward =
        layer.backward_seconds_under(model != nullptr && model->skips_parameter_gradients);
    plan.backward_seconds += backward;
    pipeline[l].backward_seconds = backward;
    if (model == nullptr) continue;  // local
    for (const SchemeModel& m : input.schemes) {
      if (fits(m, layer)) row.costs.emplace(m.id, cost_of(m, cost_input, layer));
    }
    const SchemeCost& cost = row.costs.at(row.scheme);
    if (model->chunked) row.chunks = chunks_of(layer.parameters, plan.kv_chunk_floats);
    row.compute_seconds = cost.compute_seconds;
    row.codec_seconds = cost.codec_seconds;
    row.encode_seconds = cost.encode_seconds;
    // The encode runs on the compute after the layer's backward, and its communication waits for
    // it: in the backward chain, as more of the layer's backward.
    pipeline[l].backward_seconds += cost.encode_seconds;
    pipeline[l].after_comm_seconds = cost.compute_seconds;
    if (model->bucketed) {
      bucketed = model;
      bucket_bytes[l] = model->bucket_bytes ? model->bucket_bytes(layer)
                                            : kFloatBytes * static_cast<double>(layer.parameters);
      row.bytes_sent = ring_allreduce_bytes(bucket_bytes[l], cluster.nodes);  // overheads: bucket
      row.transport_seconds = transport_seconds(cluster, row.bytes_sent);
      pipeline[l].allreduce_bytes = bucket_bytes[l];
    } else {
      row.bytes_sent = cost.bytes_sent;
      row.transport_seconds = cost.transport_seconds;
      pipeline[l].comm_seconds = cost.comm_seconds;
      for (const auto& [lane, share] : model->lanes)
        plan.lane_bytes[lane] += share * cost.bytes_sent;
    }
    pipeline[l].transport_seconds = row.transport_seconds;
    plan.transport_seconds += row.transport_seconds;
  }

  const std::vector<std::size_t> merged =
      optimal_merge_set(plan.forward_seconds, pipeline, plan.allreduce);
  const LinkSharing sharing = link_sharing(input, schemes, plan, pipeline);
  const WfbpTimeline timeline =
      wfbp_timeline(plan.forward_seconds, pipeline, plan.allreduce, merged, sharing);
  plan.iteration_seconds = timeline.iteration_seconds;

  // Buckets, in backward (send) order: an open bucket closes at its first non-merged layer.
  std::vector<bool> is_merged(schemes.size(), false);
  for (std::size_t l : merged) is_merged[l] = true;
  std::optional<Bucket> open;
  double open_bytes = 0;
  for (std::size_t l = schemes.size(); l-- > 0;) {
    PlannedLayer& row = plan.layers[l];
    row.backward_start = timeline.backward_start[l];
    row.comm_start = timeline.comm_start[l];
    row.comm_seconds = timeline.comm_seconds[l];
    if (bucketed == nullptr || row.scheme != bucketed->id) continue;
    if (!open) {
      open = Bucket{l, l, 0, 0, 0, 0};
      open_bytes = 0;
    }
    open->first = l;
    open->floats += row.parameters;
    open_bytes += bucket_bytes[l];
    row.bucket = plan.buckets.size();
    if (is_merged[l]) continue;
    const double overhead = ring_allreduce_bytes(0, cluster.nodes, cluster.frame_overhead_bytes);
    row.bytes_sent += overhead;
    open->bytes_sent =
        ring_allreduce_bytes(open_bytes, cluster.nodes, cluster.frame_overhead_bytes);
    open->comm_start = row.comm_start;
    open->comm_seconds = row.comm_seconds;
    plan.lane_bytes[bucketed->lanes.at(0).first] += open->bytes_sent;
    plan.buckets.push_back(*open);
    open.reset();
  }
  for (const PlannedLayer& row : plan.layers) {
    plan.bytes_sent += row.bytes_sent;
    if (row.scheme != kLocalScheme && !input.links.site.empty()) {
      const auto model = std::find_if(input.schemes.begin(), input.schemes.end(),
                                      [&row](const SchemeModel& m) { return m.id == row.scheme; });
      const Traffic traffic = model != input.schemes.end() ? model->traffic : Traffic::kRing;
      plan.inter_site_bytes += inter_site_bytes(input.links, traffic, row.bytes_sent);
    }
  }
  return plan;
}

}  // namespace

ClusterCost cluster_cost(const PlannerInput& input) {
  ClusterCost cluster{input.nodes,
                      traffic_link(input.links, Traffic::kRing),
                      input.frame_overhead_bytes,
                      input.gemm_flops,
                      input.step_seconds_per_float,
                      input.half_encode_seconds_per_float,
                      input.half_decode_seconds_per_float,
                      input.transport_seconds_per_byte};
  if (!input.links.site.empty()) {
    cluster.all_to_all_link = traffic_link(input.links, Traffic::kAllToAll);
    cluster.star_link = traffic_link(input.links, Traffic::kStar);
  }
  return cluster;
}

namespace {

/// make_plan() for an input with at most one bucketed scheme (checked inputs).
Plan plan_one(const PlannerInput& input) {
  const ClusterCost cluster = cluster_cost(input);
  std::size_t total_floats = 0;
  for (const LayerProfile& layer : input.layers) total_floats += layer.parameters;

  std::vector<std::string> schemes(input.layers.size(), std::string(kLocalScheme));
  if (input.nodes > 1) {
    const std::size_t chunk_floats = chunk_floats_for(input, total_floats);
    for (std::size_t l = 0; l < input.layers.size(); ++l) {
      if (input.layers[l].parameters == 0) continue;
      const bool fixed = l < input.fixed_schemes.size() && input.fixed_schemes[l].has_value();
      schemes[l] = fixed ? *input.fixed_schemes[l] : choose_scheme(input, cluster, l, chunk_floats);
    }
  }
  Plan plan = evaluate(input, cluster, schemes);
  const SchemeModel* bucketed = bucketed_model(input);
  const bool any_fixed = std::any_of(input.fixed_schemes.begin(), input.fixed_schemes.end(),
                                     [](const auto& s) { return s.has_value(); });
  if (bucketed != nullptr && !any_fixed) {
    std::vector<std::string> all_bucketed = schemes;
    bool changed = false;
    for (std::size_t l = 0; l < schemes.size(); ++l) {
      if (schemes[l] == kLocalScheme || schemes[l] == bucketed->id ||
          !fits(*bucketed, input.layers[l]))
        continue;
      all_bucketed[l] = bucketed->id;
      changed = true;
    }
    if (changed) {
      Plan alternative = evaluate(input, cluster, all_bucketed);
      std::vector<std::string> used;
      for (const std::string& s : schemes) {
        if (s != kLocalScheme && std::find(used.begin(), used.end(), s) == used.end()) {
          used.push_back(s);
        }
      }
      const double margin = used.size() > 1 ? kMixedPlanMargin : 0.0;
      if (alternative.iteration_seconds < plan.iteration_seconds * (1.0 + margin)) {
        plan = std::move(alternative);
      }
    }
  }
  plan.gemm_flops = input.gemm_flops;
  plan.step_seconds_per_float = input.step_seconds_per_float;
  plan.transport_seconds_per_byte = input.transport_seconds_per_byte;
  for (const SchemeModel& m : input.schemes) {
    for (const auto& [lane, share] : m.lanes) plan.lane_bytes.try_emplace(lane, 0.0);
  }
  if (input.gamma && total_floats >= 1) {
    if (input.nodes > 1) {
      plan.ako = partitions_for(*input.gamma, total_floats, input.nodes, cluster.link.bandwidth);
    } else {  // no peers: nothing to partition, p = 1 whatever B is
      plan.ako = partitions_for(*input.gamma, total_floats, 1, 1.0);
      plan.ako->bandwidth = 0;
    }
  }
  return plan;
}

/// make_plan() without the compression margin.
Plan plan_schemes(const PlannerInput& input) {
  std::vector<std::size_t> bucketed;  // indices in input.schemes
  for (std::size_t i = 0; i < input.schemes.size(); ++i) {
    if (input.schemes[i].bucketed) bucketed.push_back(i);
  }
  if (bucketed.size() <= 1) return plan_one(input);
  // One bucketed scheme per plan (a bucket is one ring): plan with each in turn, the others left
  // out, and keep the shortest predicted iteration (ties: the earlier in input.schemes). A plan
  // whose fixed schemes name a left-out one is not tried.
  std::optional<Plan> best;
  for (const std::size_t keep : bucketed) {
    PlannerInput one = input;
    one.schemes.clear();
    for (std::size_t i = 0; i < input.schemes.size(); ++i) {
      if (i == keep || !input.schemes[i].bucketed) one.schemes.push_back(input.schemes[i]);
    }
    const bool fixed_elsewhere =
        std::any_of(input.fixed_schemes.begin(), input.fixed_schemes.end(),
                    [&](const auto& f) { return f && model_of(one, *f) == nullptr; });
    if (fixed_elsewhere) continue;
    Plan plan = plan_one(one);
    if (!best || plan.iteration_seconds < best->iteration_seconds) best = std::move(plan);
  }
  detail::require(best.has_value(), "fixed schemes", "several bucketed schemes",
                  "at most one bucketed scheme among them");
  for (const SchemeModel& m : input.schemes) {
    for (const auto& [lane, share] : m.lanes) best->lane_bytes.try_emplace(lane, 0.0);
  }
  return *std::move(best);
}

}  // namespace

Plan make_plan(const PlannerInput& input) {
  check_input(input);
  check_schemes(input);
  const auto compressed = [](const SchemeModel& m) { return m.compressed; };
  const bool fixed_compressed =
      std::any_of(input.fixed_schemes.begin(), input.fixed_schemes.end(), [&](const auto& f) {
        const SchemeModel* m = f ? model_of(input, *f) : nullptr;
        return m != nullptr && m->compressed;
      });
  if (std::none_of(input.schemes.begin(), input.schemes.end(), compressed) ||
      std::all_of(input.schemes.begin(), input.schemes.end(), compressed) || fixed_compressed) {
    return plan_schemes(input);
  }
  PlannerInput uncompressed = input;
  std::erase_if(uncompressed.schemes, compressed);
  Plan with = plan_schemes(input);
  Plan without = plan_schemes(uncompressed);
  Plan& kept = compression_pays(with.iteration_seconds, without.iteration_seconds) ? with : without;
  kept.compressed_iteration_seconds = with.iteration_seconds;
  kept.uncompressed_iteration_seconds = without.iteration_seconds;
  for (const SchemeModel& m : input.schemes) {
    for (const auto& [lane, share] : m.lanes) kept.lane_bytes.try_emplace(lane, 0.0);
  }
  return std::move(kept);
}

}  // namespace gradmesh::topo

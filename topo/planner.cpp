#include "topo/planner.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "topo/input_check.h"
#include "topo/kv_placement.h"
#include "topo/merge_planner.h"
#include "topo/poseidon_cost.h"

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

bool sfb_applies(const PlannerInput& input, const LayerProfile& layer) {
  return input.schemes.sfb && layer.sufficient_factors;
}

std::size_t chunk_floats_for(const PlannerInput& input, std::size_t ps_floats) {
  if (input.kv_chunk_bytes) return std::max<std::size_t>(1, *input.kv_chunk_bytes / sizeof(float));
  return KvPlacement::auto_chunk_floats(ps_floats, input.nodes);
}

/// The scheme of layer `l` chosen on its own (n > 1, parameters > 0).
LayerScheme choose_scheme(const PlannerInput& input, const ClusterCost& cluster, std::size_t l,
                          std::size_t chunk_floats) {
  const LayerProfile& layer = input.layers[l];
  const bool sfb = sfb_applies(input, layer);
  detail::require(input.schemes.ps || input.schemes.allreduce || sfb,
                  layer_label(input, l) + "schemes allowed (ps, sfb, allreduce)",
                  std::string(input.schemes.ps ? "1" : "0") + (input.schemes.sfb ? "1" : "0") +
                      (input.schemes.allreduce ? "1" : "0"),
                  "one that fits the layer (SFB needs sufficient factors)");
  if (input.choose == ChooseBy::kBytes) {
    const bool dense_scheme = input.schemes.ps || input.schemes.allreduce;
    const LayerScheme dense = input.schemes.ps ? LayerScheme::kPs : LayerScheme::kAllReduce;
    if (!sfb) return dense;
    if (!dense_scheme) return LayerScheme::kSfb;
    return best_scheme(true, layer.rows, layer.cols, input.batch, input.nodes, input.nodes) ==
                   Scheme::kSfb
               ? LayerScheme::kSfb
               : dense;
  }
  LayerScheme best = LayerScheme::kLocal;
  double best_seconds = 0;
  const auto consider = [&](LayerScheme scheme, double seconds) {
    if (best == LayerScheme::kLocal || seconds < best_seconds) {
      best = scheme;
      best_seconds = seconds;
    }
  };
  if (input.schemes.ps) {
    consider(LayerScheme::kPs, ps_cost(cluster, layer.parameters, chunk_floats).seconds());
  }
  if (input.schemes.allreduce) {
    consider(LayerScheme::kAllReduce, allreduce_cost(cluster, layer.parameters).seconds());
  }
  if (sfb) {
    // SFB's backward skips the dW GEMM that the others compute: that time is its saving.
    const double saved = layer.backward_seconds - layer.backward_seconds_under(true);
    consider(LayerScheme::kSfb,
             sfb_cost(cluster, input.batch, layer.rows, layer.cols).seconds() - saved);
  }
  return best;
}

/// The plan for given per-layer schemes: chunks, costs, merge groups, timeline, budgets.
Plan evaluate(const PlannerInput& input, const ClusterCost& cluster,
              const std::vector<LayerScheme>& schemes) {
  Plan plan;
  plan.link = cluster.link;
  plan.allreduce = ring_allreduce_cost(cluster.link, cluster.nodes, cluster.frame_overhead_bytes);
  std::size_t ps_floats = 0;
  for (std::size_t l = 0; l < schemes.size(); ++l) {
    if (schemes[l] == LayerScheme::kPs) ps_floats += input.layers[l].parameters;
  }
  plan.kv_chunk_floats = chunk_floats_for(input, ps_floats);

  std::vector<WfbpLayer> pipeline(input.layers.size());
  for (std::size_t l = 0; l < input.layers.size(); ++l) {
    const LayerProfile& layer = input.layers[l];
    PlannedLayer& row = plan.layers.emplace_back();
    row.layer = l;
    row.name = layer.name;
    row.scheme = schemes[l];
    row.parameters = layer.parameters;
    plan.forward_seconds += layer.forward_seconds;
    const double backward = layer.backward_seconds_under(row.scheme == LayerScheme::kSfb);
    plan.backward_seconds += backward;
    pipeline[l].backward_seconds = backward;
    if (row.scheme == LayerScheme::kLocal) continue;
    if (input.schemes.ps || row.scheme == LayerScheme::kPs) {
      row.ps = ps_cost(cluster, layer.parameters, plan.kv_chunk_floats);
    }
    if (input.schemes.allreduce || row.scheme == LayerScheme::kAllReduce) {
      row.allreduce = allreduce_cost(cluster, layer.parameters);
    }
    if (layer.sufficient_factors && (input.schemes.sfb || row.scheme == LayerScheme::kSfb)) {
      row.sfb = sfb_cost(cluster, input.batch, layer.rows, layer.cols);
    }
    switch (row.scheme) {
      case LayerScheme::kPs:
        row.chunks = chunks_of(layer.parameters, plan.kv_chunk_floats);
        row.bytes_sent = row.ps->bytes_sent;
        pipeline[l].comm_seconds = row.ps->comm_seconds;
        plan.stage_bytes[std::string(kStageKvPush)] += row.bytes_sent / 2;
        plan.stage_bytes[std::string(kStageKvBroadcast)] += row.bytes_sent / 2;
        break;
      case LayerScheme::kSfb:
        row.bytes_sent = row.sfb->bytes_sent;
        row.compute_seconds = row.sfb->compute_seconds;
        pipeline[l].comm_seconds = row.sfb->comm_seconds;
        pipeline[l].after_comm_seconds = row.sfb->compute_seconds;
        plan.stage_bytes[std::string(kStageSfBroadcast)] += row.bytes_sent;
        break;
      case LayerScheme::kAllReduce:
        row.bytes_sent = ring_allreduce_bytes(kFloatBytes * static_cast<double>(layer.parameters),
                                              cluster.nodes);  // overheads: on the bucket
        row.compute_seconds = row.allreduce->compute_seconds;
        pipeline[l].allreduce_bytes = kFloatBytes * static_cast<double>(layer.parameters);
        pipeline[l].after_comm_seconds = row.allreduce->compute_seconds;
        break;
      case LayerScheme::kLocal:
        break;
    }
  }

  const std::vector<std::size_t> merged =
      optimal_merge_set(plan.forward_seconds, pipeline, plan.allreduce);
  const WfbpTimeline timeline =
      wfbp_timeline(plan.forward_seconds, pipeline, plan.allreduce, merged);
  plan.iteration_seconds = timeline.iteration_seconds;

  // Buckets, in backward (send) order: an open bucket closes at its first non-merged layer.
  std::vector<bool> is_merged(schemes.size(), false);
  for (std::size_t l : merged) is_merged[l] = true;
  std::optional<MergeGroup> open;
  for (std::size_t l = schemes.size(); l-- > 0;) {
    PlannedLayer& row = plan.layers[l];
    row.backward_start = timeline.backward_start[l];
    row.comm_start = timeline.comm_start[l];
    row.comm_seconds = timeline.comm_seconds[l];
    if (row.scheme != LayerScheme::kAllReduce) continue;
    if (!open) open = MergeGroup{l, l, 0, 0, 0, 0};
    open->first = l;
    open->floats += row.parameters;
    row.group = plan.groups.size();
    if (is_merged[l]) continue;
    const double overhead = ring_allreduce_bytes(0, cluster.nodes, cluster.frame_overhead_bytes);
    row.bytes_sent += overhead;
    open->bytes_sent = ring_allreduce_bytes(kFloatBytes * static_cast<double>(open->floats),
                                            cluster.nodes, cluster.frame_overhead_bytes);
    open->comm_start = row.comm_start;
    open->comm_seconds = row.comm_seconds;
    plan.stage_bytes[std::string(kStageAllReduce)] += open->bytes_sent;
    plan.groups.push_back(*open);
    open.reset();
  }
  for (const PlannedLayer& row : plan.layers) plan.bytes_sent += row.bytes_sent;
  return plan;
}

}  // namespace

ChooseBy parse_choose_by(std::string_view text) {
  if (text == "time") return ChooseBy::kTime;
  if (text == "bytes") return ChooseBy::kBytes;
  throw ConfigError("sync.poseidon.choose = \"" + std::string(text) +
                    "\": expected one of time, bytes");
}

Plan make_plan(const PlannerInput& input) {
  check_input(input);
  const ClusterCost cluster{input.nodes, slowest_link(input.links), input.frame_overhead_bytes,
                            input.gemm_flops, input.step_seconds_per_float};
  std::size_t total_floats = 0;
  for (const LayerProfile& layer : input.layers) total_floats += layer.parameters;

  std::vector<LayerScheme> schemes(input.layers.size(), LayerScheme::kLocal);
  if (input.nodes > 1) {
    const std::size_t chunk_floats = chunk_floats_for(input, total_floats);
    for (std::size_t l = 0; l < input.layers.size(); ++l) {
      if (input.layers[l].parameters == 0) continue;
      const bool fixed = l < input.fixed_schemes.size() && input.fixed_schemes[l].has_value();
      schemes[l] = fixed ? *input.fixed_schemes[l] : choose_scheme(input, cluster, l, chunk_floats);
    }
  }
  Plan plan = evaluate(input, cluster, schemes);
  const auto not_bucketed = [](LayerScheme s) {
    return s == LayerScheme::kPs || s == LayerScheme::kSfb;
  };
  const bool any_fixed = std::any_of(input.fixed_schemes.begin(), input.fixed_schemes.end(),
                                     [](const auto& s) { return s.has_value(); });
  if (input.choose == ChooseBy::kTime && input.schemes.allreduce && !any_fixed &&
      std::any_of(schemes.begin(), schemes.end(), not_bucketed)) {
    std::vector<LayerScheme> bucketed = schemes;
    std::replace_if(bucketed.begin(), bucketed.end(), not_bucketed, LayerScheme::kAllReduce);
    Plan alternative = evaluate(input, cluster, bucketed);
    if (alternative.iteration_seconds < plan.iteration_seconds) plan = std::move(alternative);
  }
  plan.gemm_flops = input.gemm_flops;
  plan.step_seconds_per_float = input.step_seconds_per_float;
  for (std::string_view stage :
       {kStageKvPush, kStageKvBroadcast, kStageSfBroadcast, kStageAllReduce}) {
    plan.stage_bytes.try_emplace(std::string(stage), 0.0);
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

}  // namespace gradmesh::topo

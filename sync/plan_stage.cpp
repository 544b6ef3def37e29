#include "sync/plan_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/error.h"
#include "sync/layer_plan.h"
#include "sync/plan_input.h"
#include "topo/poseidon_cost.h"

namespace gradmesh::sync {

PlanStage::PlanStage(SyncContext context, std::string name, topo::Plan plan)
    : ctx_(std::move(context)),
      name_(std::move(name)),
      plan_(std::move(plan)),
      router_(ctx_.router),
      scheme_of_(plan_.layers.size(), nullptr) {
  GRADMESH_CHECK_EQ(plan_.layers.size(), ctx_.model.num_layers(), "plan: layers");
  // Each scheme's layers, ids in order of first use.
  std::vector<std::pair<std::string, std::vector<std::size_t>>> by_scheme;
  for (const topo::PlannedLayer& row : plan_.layers) {
    if (row.scheme == topo::kLocalScheme) continue;
    auto it = std::find_if(by_scheme.begin(), by_scheme.end(),
                           [&](const auto& entry) { return entry.first == row.scheme; });
    if (it == by_scheme.end()) it = by_scheme.insert(by_scheme.end(), {row.scheme, {}});
    it->second.push_back(row.layer);
  }
  for (const auto& [id, layers] : by_scheme) {
    schemes_.push_back(scheme_entry(id).make(ctx_, router_, plan_, layers));
    for (const std::size_t l : layers) scheme_of_[l] = schemes_.back().get();
  }
  // The planner's byte budgets share the link: a lane that must send more per iteration gets the
  // larger share, so the lanes of one iteration finish together (Poseidon arXiv'15 4.3.3).
  router_.set_lane_weights(plan_.lane_bytes);
  router_.on_failure([this](const PeerError& error) {
    const auto e = std::make_exception_ptr(error);
    for (const auto& scheme : schemes_) scheme->fail_all(e);
  });
}

void PlanStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (const topo::PlannedLayer& row : plan_.layers) {
    if (row.scheme != topo::kLocalScheme || row.parameters == 0) continue;
    (void)add_local_step(graph, tasks, ctx_, row.layer);
  }
  for (const auto& scheme : schemes_) scheme->build(graph, tasks);
}

std::vector<LayerPlan> PlanStage::plan() const {
  std::vector<LayerPlan> rows;
  for (const topo::PlannedLayer& p : plan_.layers) {
    const std::size_t l = p.layer;
    const Scheme* scheme = scheme_of_[l];
    LayerPlan row =
        describe_layer(ctx_.model, l, scheme ? scheme->describe(l) : std::string("local"));
    if (row.parameters > 0) {
      tasks::Layer& layer = ctx_.model.layer(l);
      if (layer.has_sufficient_factors()) {  // Table 1's M x N weight matrix
        const std::size_t m = layer.output_size(), n = layer.input_size();
        row.ps_floats = topo::ps_floats(m, n, ctx_.nodes, ctx_.nodes);
        row.sfb_floats = topo::sfb_floats(ctx_.batch_size, m, n, ctx_.nodes);
      } else {  // a convolution's filters: its parameters, whatever its activations' sizes
        row.ps_floats = topo::ps_floats(row.parameters, 1, ctx_.nodes, ctx_.nodes);
      }
      row.chunks = scheme ? scheme->chunks(l) : 0;
      row.predicted_bytes_sent = scheme ? scheme->bytes_sent(l) : 0.0;
      row.predicted_compute_seconds = p.encode_seconds + p.compute_seconds;
      row.predicted_seconds = p.comm_seconds + row.predicted_compute_seconds;
      row.predicted_codec_seconds = p.codec_seconds;
      row.predicted_transport_seconds = p.transport_seconds;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::map<std::string, double> PlanStage::summary() const {
  double bytes = 0;
  for (const LayerPlan& row : plan()) bytes += row.predicted_bytes_sent;
  std::map<std::string, double> out{{"predicted_bytes_sent", bytes},
                                    {"predicted_iteration_seconds", plan_.iteration_seconds},
                                    {"alpha", plan_.link.alpha},
                                    {"message_overhead", plan_.link.message_seconds},
                                    {"bandwidth", plan_.link.bandwidth},
                                    {"gemm_flops", plan_.gemm_flops},
                                    {"step_seconds_per_float", plan_.step_seconds_per_float},
                                    {"kv_chunk_floats", static_cast<double>(plan_.kv_chunk_floats)},
                                    {"buckets", static_cast<double>(plan_.buckets.size())}};
  if (plan_.transport_seconds_per_byte > 0) {
    out["transport_seconds_per_byte"] = plan_.transport_seconds_per_byte;
    out["predicted_transport_seconds"] = plan_.transport_seconds;
  }
  for (const auto& [lane, budget] : plan_.lane_bytes) out["budget_" + lane] = budget;
  if (plan_.inter_site_bytes > 0)  // sites: simulate --links
    out["predicted_inter_site_bytes"] = plan_.inter_site_bytes;
  if (plan_.uncompressed_iteration_seconds > 0) {
    out["predicted_compressed_iteration_seconds"] = plan_.compressed_iteration_seconds;
    out["predicted_uncompressed_iteration_seconds"] = plan_.uncompressed_iteration_seconds;
  }
  return out;
}

std::map<std::string, double> PlanStage::epoch_figures() {
  std::map<std::string, double> out;
  for (const auto& scheme : schemes_) scheme->epoch_figures(out);
  return out;
}

namespace {

/// The number the signature gives a built-in scheme (as before schemes had ids, so that a
/// checkpoint of an earlier build still matches), else its id.
std::string signature_scheme(const std::string& id) {
  if (id == topo::kLocalScheme) return "0";
  if (id == topo::kPsScheme) return "1";
  if (id == topo::kSfbScheme) return "2";
  if (id == topo::kAllReduceScheme) return "3";
  return id;
}

/// What decides the order of every sum: per layer its scheme, chunks and bucket; the chunk size.
std::string plan_signature(const topo::Plan& plan) {
  std::string out = "kv_chunk_floats " + std::to_string(plan.kv_chunk_floats) + "\n";
  for (const topo::PlannedLayer& l : plan.layers) {
    out += "layer " + std::to_string(l.layer) + " scheme " + signature_scheme(l.scheme) +
           " chunks " + std::to_string(l.chunks) + " bucket " +
           (l.bucket ? std::to_string(*l.bucket) : std::string("-")) + "\n";
  }
  for (const topo::Bucket& g : plan.buckets) {
    out += "bucket " + std::to_string(g.first) + ".." + std::to_string(g.last) + "\n";
  }
  return out;
}

}  // namespace

void PlanStage::save_state(engine::StateWriter& out) {
  out.write_string(plan_signature(plan_));
  for (const auto& scheme : schemes_) scheme->save_state(out);
}

void PlanStage::load_state(engine::StateReader& in) {
  const std::string saved = in.read_string();
  if (saved == plan_signature(plan_)) {
    for (const auto& scheme : schemes_) scheme->load_state(in);
    return;
  }
  spdlog::warn(
      "{}: the plan differs from the checkpoint's (the planner measured again at start-up: "
      "planner.probe): sums run in another order, and the schemes' own state (error-feedback "
      "residuals, warm starts, iteration counts) starts afresh, so this run is not bitwise the "
      "uninterrupted one. The checkpoint's plan:\n{}This run's:\n{}",
      in.source(), saved, plan_signature(plan_));
  // The saved states are laid out by the other plan's schemes: not read. Each scheme keeps the
  // state it has (at a resume, its initial one) and takes the loaded model and optimizer as it
  // would its own checkpoint (PS refreshes its KV shards' master copies from the replica).
  engine::StateWriter own;
  for (const auto& scheme : schemes_) scheme->save_state(own);
  engine::StateReader again(own.bytes(), in.source() + " (this plan's schemes, afresh)");
  for (const auto& scheme : schemes_) scheme->load_state(again);
}

std::unique_ptr<SyncStage> make_plan_stage(
    SyncContext context, std::string_view strategy, const std::vector<std::string>& schemes,
    const std::function<void(const SyncOptions&, topo::PlannerInput&)>& adjust) {
  topo::PlannerInput input = planner_input(context, schemes);
  if (adjust) adjust(context.options, input);
  topo::Plan plan = topo::make_plan(input);
  return std::make_unique<PlanStage>(std::move(context), std::string(strategy), std::move(plan));
}

}  // namespace gradmesh::sync

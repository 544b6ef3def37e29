#include "sync/plan_stage.h"

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "sync/layer_plan.h"
#include "sync/plan_input.h"
#include "topo/poseidon_cost.h"

namespace gradmesh::sync {

PlanStage::PlanStage(SyncContext context, std::string name, topo::Plan plan)
    : ctx_(std::move(context)),
      name_(std::move(name)),
      plan_(std::move(plan)),
      channel_(ctx_.channel) {
  GRADMESH_CHECK_EQ(plan_.layers.size(), ctx_.model.num_layers(), "plan: layers");
  std::vector<std::size_t> ps_layers, sfb_layers;
  for (const topo::PlannedLayer& row : plan_.layers) {
    if (row.scheme == topo::LayerScheme::kPs) ps_layers.push_back(row.layer);
    if (row.scheme == topo::LayerScheme::kSfb) sfb_layers.push_back(row.layer);
  }
  if (!ps_layers.empty()) {
    ps_ = std::make_unique<PsScheme>(ctx_, channel_, ps_layers, plan_.kv_chunk_floats);
  }
  if (!sfb_layers.empty()) sfb_ = std::make_unique<SfbScheme>(ctx_, channel_, sfb_layers);
  if (!plan_.groups.empty()) {
    std::vector<std::pair<std::size_t, std::size_t>> buckets;
    for (const topo::MergeGroup& g : plan_.groups) buckets.emplace_back(g.first, g.last);
    allreduce_ = std::make_unique<AllReduceScheme>(ctx_, channel_, buckets);
  }
  // The planner's byte budgets share the link: a stage that must send more per iteration gets the
  // larger share, so the stages of one iteration finish together (Poseidon arXiv'15 4.3.3).
  channel_.set_stage_weights(plan_.stage_bytes);
  channel_.on_failure([this](const PeerError& error) {
    const auto e = std::make_exception_ptr(error);
    if (ps_) ps_->fail_all(e);
    if (sfb_) sfb_->fail_all(e);
    if (allreduce_) allreduce_->fail_all(e);
  });
}

void PlanStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (const topo::PlannedLayer& row : plan_.layers) {
    if (row.scheme != topo::LayerScheme::kLocal || row.parameters == 0) continue;
    const std::size_t l = row.layer;
    auto step = graph.emplace("step_" + std::to_string(l), engine::Arena::kCompute,
                              [this, l](engine::TaskContext&) {
                                ctx_.optimizer.step(ctx_.model.parameter_offset(l),
                                                    ctx_.model.layer_parameters(l),
                                                    ctx_.model.layer_gradients(l));
                              });
    tasks.backward[l].precede(step);
    step.precede(tasks.done);
  }
  if (ps_) ps_->build(graph, tasks);
  if (sfb_) sfb_->build(graph, tasks);
  if (allreduce_) allreduce_->build(graph, tasks);
}

std::vector<LayerPlan> PlanStage::plan() const {
  std::vector<LayerPlan> rows;
  for (const topo::PlannedLayer& p : plan_.layers) {
    const std::size_t l = p.layer;
    std::string scheme = "local";
    double bytes = 0;
    switch (p.scheme) {
      case topo::LayerScheme::kPs:
        scheme = "PS";
        bytes = ps_->bytes_sent(l);
        break;
      case topo::LayerScheme::kSfb:
        scheme = "SFB";
        bytes = sfb_->bytes_sent(l);
        break;
      case topo::LayerScheme::kAllReduce:
        scheme = "allreduce b" + std::to_string(p.group.value_or(0));
        bytes = p.bytes_sent;
        break;
      case topo::LayerScheme::kLocal:
        break;
    }
    LayerPlan row = describe_layer(ctx_.model, l, scheme);
    if (row.parameters > 0) {
      tasks::Layer& layer = ctx_.model.layer(l);
      if (layer.has_sufficient_factors()) {  // Table 1's M x N weight matrix
        const std::size_t m = layer.output_size(), n = layer.input_size();
        row.ps_floats = topo::ps_floats(m, n, ctx_.nodes, ctx_.nodes);
        row.sfb_floats = topo::sfb_floats(ctx_.batch_size, m, n, ctx_.nodes);
      } else {  // a convolution's filters: its parameters, whatever its activations' sizes
        row.ps_floats = topo::ps_floats(row.parameters, 1, ctx_.nodes, ctx_.nodes);
      }
      row.chunks = ps_ ? ps_->chunks(l) : 0;
      row.predicted_bytes_sent = bytes;
      row.predicted_seconds = p.comm_seconds + p.compute_seconds;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::map<std::string, double> PlanStage::summary() const {
  double bytes = 0;
  for (const LayerPlan& row : plan()) bytes += row.predicted_bytes_sent;
  std::map<std::string, double> out{
      {"predicted_bytes_sent", bytes},
      {"predicted_iteration_seconds", plan_.iteration_seconds},
      {"alpha", plan_.link.alpha},
      {"message_overhead", plan_.link.message_seconds},
      {"bandwidth", plan_.link.bandwidth},
      {"gemm_flops", plan_.gemm_flops},
      {"step_seconds_per_float", plan_.step_seconds_per_float},
      {"kv_chunk_floats", static_cast<double>(plan_.kv_chunk_floats)},
      {"buckets", static_cast<double>(plan_.groups.size())}};
  for (const auto& [stage, budget] : plan_.stage_bytes) out["budget_" + stage] = budget;
  return out;
}

namespace {

/// What decides the order of every sum: per layer its scheme, chunks and bucket; the chunk size.
std::string plan_signature(const topo::Plan& plan) {
  std::string out = "kv_chunk_floats " + std::to_string(plan.kv_chunk_floats) + "\n";
  for (const topo::PlannedLayer& l : plan.layers) {
    out += "layer " + std::to_string(l.layer) + " scheme " + std::to_string(static_cast<int>(l.scheme)) +
           " chunks " + std::to_string(l.chunks) + " bucket " +
           (l.group ? std::to_string(*l.group) : std::string("-")) + "\n";
  }
  for (const topo::MergeGroup& g : plan.groups) {
    out += "bucket " + std::to_string(g.first) + ".." + std::to_string(g.last) + "\n";
  }
  return out;
}

}  // namespace

void PlanStage::save_state(engine::StateWriter& out) { out.write_string(plan_signature(plan_)); }

void PlanStage::load_state(engine::StateReader& in) {
  const std::string saved = in.read_string();
  if (saved != plan_signature(plan_)) {
    spdlog::warn("{}: the plan differs from the checkpoint's (the planner measured again at "
                 "start-up: planner.probe): sums run in another order, so this run is not bitwise "
                 "the uninterrupted one. The checkpoint's plan:\n{}This run's:\n{}",
                 in.source(), saved, plan_signature(plan_));
  }
  if (ps_) ps_->reload_masters();
}

std::unique_ptr<SyncStage> make_plan_stage(
    SyncContext context, std::string_view strategy, const topo::SchemeSet& schemes,
    const std::function<void(const SyncOptions&, topo::PlannerInput&)>& adjust) {
  topo::PlannerInput input = planner_input(context, schemes);
  if (adjust) adjust(context.options, input);
  topo::Plan plan = topo::make_plan(input);
  return std::make_unique<PlanStage>(std::move(context), std::string(strategy), std::move(plan));
}

}  // namespace gradmesh::sync

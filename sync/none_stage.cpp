#include "sync/none_stage.h"

#include "sync/layer_plan.h"

namespace gradmesh::sync {

NoneStage::NoneStage(SyncContext context) : ctx_(std::move(context)) {}

void NoneStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    if (ctx_.model.layer(l).parameter_count() == 0) continue;
    auto step = graph.emplace("step_" + std::to_string(l), engine::Arena::kCompute,
                              [this, l](engine::TaskContext&) {
                                ctx_.optimizer.step(ctx_.model.parameter_offset(l),
                                                    ctx_.model.layer_parameters(l),
                                                    ctx_.model.layer_gradients(l));
                              });
    tasks.backward[l].precede(step);
    step.precede(tasks.done);
  }
}

std::vector<LayerPlan> NoneStage::plan() const {
  std::vector<LayerPlan> rows;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    rows.push_back(describe_layer(ctx_.model, l, "local"));
  }
  return rows;
}

}  // namespace gradmesh::sync

#include "sync/scheme.h"

namespace gradmesh::sync {

engine::TaskHandle add_local_step(engine::Graph& graph, const IterationTasks& tasks,
                                  const SyncContext& ctx, std::size_t layer,
                                  const std::string& prefix) {
  auto step = graph.emplace(
      prefix + std::to_string(layer), engine::Arena::kCompute, [&ctx, layer](engine::TaskContext&) {
        ctx.optimizer.step(ctx.model.parameter_offset(layer), ctx.model.layer_parameters(layer),
                           ctx.model.layer_gradients(layer));
      });
  tasks.backward[layer].precede(step);
  step.precede(tasks.done);
  return step;
}

}  // namespace gradmesh::sync

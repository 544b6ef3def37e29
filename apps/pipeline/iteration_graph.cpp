#include "apps/pipeline/iteration_graph.h"

#include <string>
#include <utility>

#include "engine/error.h"

namespace gradmesh::app {

IterationGraph::IterationGraph(tasks::Model& model, DataSource& source,
                               std::vector<PreprocessTask> preprocess, engine::Executor& executor,
                               sync::SyncStage& stage, const ShardInfo& shard,
                               std::size_t iterations_per_epoch)
    : model_(model), executor_(executor), iterations_per_epoch_(iterations_per_epoch) {
  if (iterations_per_epoch_ == 0) {
    throw ConfigError("the data source gives no full batch of " +
                      std::to_string(shard.batch_size) + " samples per node");
  }
  if (source.sample_shape().size() != model.input_size()) {
    throw ConfigError("the data source's samples have " +
                      std::to_string(source.sample_shape().size()) +
                      " floats, the model's input " + std::to_string(model.input_size()));
  }
  const std::size_t batch = shard.batch_size;
  const std::size_t layers = model.num_layers();

  SourceState initial{std::vector<std::int32_t>(batch), Batch{}};
  tasks_.source = graph_.emplace_stateful(
      "source", engine::Arena::kCompute, std::move(initial),
      [this, &source, batch](SourceState& s, engine::TaskContext& ctx) {
        s.batch.input = model_.input(batch);
        s.batch.labels = s.labels;
        s.batch.epoch = ctx.run() / iterations_per_epoch_;
        s.batch.iteration = ctx.run() % iterations_per_epoch_;
        source.fill(s.batch);
      });
  SourceState& state = graph_.state<SourceState>(tasks_.source);
  engine::TaskHandle previous = tasks_.source;
  for (PreprocessTask& p : preprocess) {
    auto task = graph_.emplace(std::move(p.name), engine::Arena::kCompute,
                               [&state, fn = std::move(p.fn)](engine::TaskContext& ctx) {
                                 fn(state.batch, ctx);
                               });
    previous.precede(task);
    tasks_.preprocess.push_back(task);
    previous = task;
  }

  sync::IterationTasks& hooks = tasks_.model;
  for (std::size_t l = 0; l < layers; ++l) {
    auto forward = graph_.emplace("forward_" + std::to_string(l), engine::Arena::kCompute,
                                  [this, l, batch](engine::TaskContext&) {
                                    model_.forward_layer(l, batch);
                                  });
    previous.precede(forward);
    hooks.forward.push_back(forward);
    previous = forward;
  }
  tasks_.loss = graph_.emplace_stateful("loss", engine::Arena::kCompute, LossState{},
                                        [this, &state](LossState& s, engine::TaskContext&) {
                                          s.loss = model_.loss_backward(state.labels);
                                        });
  previous.precede(tasks_.loss);
  previous = tasks_.loss;
  hooks.backward.resize(layers);
  for (std::size_t l = layers; l-- > 0;) {
    auto backward = graph_.emplace("backward_" + std::to_string(l), engine::Arena::kCompute,
                                   [this, l, batch](engine::TaskContext&) {
                                     model_.backward_layer(l, batch);
                                   });
    previous.precede(backward);
    hooks.backward[l] = backward;
    previous = backward;
  }
  hooks.done = graph_.emplace("done", engine::Arena::kCompute, [](engine::TaskContext&) {});
  previous.precede(hooks.done);
  stage.build(graph_, hooks);
}

float IterationGraph::step() {
  executor_.run(graph_);
  return graph_.state<LossState>(tasks_.loss).loss;
}

}  // namespace gradmesh::app

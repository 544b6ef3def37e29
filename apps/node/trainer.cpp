#include "apps/node/trainer.h"

#include <string>

namespace gradmesh::app {

Trainer::Trainer(tasks::Model& model, const tasks::Dataset& train, engine::Executor& executor,
                 sync::SyncStage& stage, TrainerOptions options)
    : model_(model),
      executor_(executor),
      iterations_per_epoch_(tasks::ShardSampler::iterations_per_epoch(train.count, options.nodes,
                                                                      options.batch_size)) {
  const std::size_t batch = options.batch_size;
  const std::size_t layers = model.num_layers();
  LoadState load_state{
      tasks::ShardSampler(train.count, options.nodes, options.rank, batch, options.seed),
      std::vector<std::size_t>(batch), std::vector<std::int32_t>(batch), iterations_per_epoch_};

  load_ = graph_.emplace_stateful(
      "load", engine::Arena::kCompute, std::move(load_state),
      [this, &train, batch](LoadState& s, engine::TaskContext& ctx) {
        const std::size_t epoch = ctx.run() / s.iterations_per_epoch;
        const std::size_t iteration = ctx.run() % s.iterations_per_epoch;
        s.sampler.batch_indices(epoch, iteration, s.indices);
        tasks::gather_batch(train, s.indices, model_.input(batch), s.labels);
      });

  sync::IterationTasks tasks;
  engine::TaskHandle previous = load_;
  for (std::size_t l = 0; l < layers; ++l) {
    auto forward = graph_.emplace("forward_" + std::to_string(l), engine::Arena::kCompute,
                                  [this, l, batch](engine::TaskContext&) {
                                    model_.forward_layer(l, batch);
                                  });
    previous.precede(forward);
    tasks.forward.push_back(forward);
    previous = forward;
  }
  const std::vector<std::int32_t>& labels = graph_.state<LoadState>(load_).labels;
  loss_ = graph_.emplace_stateful("loss", engine::Arena::kCompute, LossState{},
                                  [this, &labels](LossState& s, engine::TaskContext&) {
                                    s.loss = model_.loss_backward(labels);
                                  });
  previous.precede(loss_);
  previous = loss_;
  tasks.backward.resize(layers);
  for (std::size_t l = layers; l-- > 0;) {
    auto backward = graph_.emplace("backward_" + std::to_string(l), engine::Arena::kCompute,
                                   [this, l, batch](engine::TaskContext&) {
                                     model_.backward_layer(l, batch);
                                   });
    previous.precede(backward);
    tasks.backward[l] = backward;
    previous = backward;
  }
  tasks.done = graph_.emplace("done", engine::Arena::kCompute, [](engine::TaskContext&) {});
  previous.precede(tasks.done);
  stage.build(graph_, tasks);
}

float Trainer::step() {
  executor_.run(graph_);
  return graph_.state<LossState>(loss_).loss;
}

}  // namespace gradmesh::app

#include "apps/pipeline/iteration_graph.h"

#include <cxxabi.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <typeinfo>
#include <utility>

#include "engine/error.h"

namespace gradmesh::app {

std::string source_name(const DataSource& source) {
  const char* mangled = typeid(source).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  for (const std::string anonymous = "(anonymous namespace)::";;) {  // a test's or a program's
    const std::size_t at = out.find(anonymous);
    if (at == std::string::npos) break;
    out.erase(at, anonymous.size());
  }
  return out;
}

void check_labels(const Batch& batch, std::size_t classes, const std::string& source) {
  for (std::size_t i = 0; i < batch.labels.size(); ++i) {
    const std::int32_t label = batch.labels[i];
    if (label >= 0 && static_cast<std::size_t>(label) < classes) continue;
    throw DataError("data source " + source + ": label " + std::to_string(label) + " at index " +
                    std::to_string(i) + " of the batch of epoch " +
                    std::to_string(batch.epoch + 1) + ", iteration " +
                    std::to_string(batch.iteration + 1) + " (its fill(), or a preprocessing " +
                    "task after it, wrote it): expected a class in [0, " + std::to_string(classes) +
                    "), the model's " + std::to_string(classes) + " outputs");
  }
}

IterationGraph::IterationGraph(tasks::Model& model, DataSource& source,
                               std::vector<PreprocessTask> preprocess, engine::Executor& executor,
                               sync::SyncStage& stage, const ShardInfo& shard,
                               std::size_t iterations_per_epoch)
    : model_(model), executor_(executor), iterations_per_epoch_(iterations_per_epoch) {
  if (iterations_per_epoch_ == 0) {
    throw ConfigError("the data source gives no full batch of " + std::to_string(shard.batch_size) +
                      " samples per node");
  }
  if (source.sample_shape().size() != model.input_size()) {
    throw ConfigError("the data source's samples have " +
                      std::to_string(source.sample_shape().size()) + " floats, the model's input " +
                      std::to_string(model.input_size()));
  }
  if (const auto classes = source.classes(); classes && *classes > model.output_size()) {
    throw ConfigError("the data source's labels take " + std::to_string(*classes) +
                      " classes, the model's last layer gives " +
                      std::to_string(model.output_size()) +
                      " outputs (data.classes, or the units of the last dense layer)");
  }
  const std::size_t batch = shard.batch_size;
  const std::size_t layers = model.num_layers();

  SourceState initial{std::vector<std::int32_t>(batch), Batch{}};
  tasks_.source =
      graph_.emplace_stateful("source", engine::Arena::kCompute, std::move(initial),
                              [this, &source, batch](SourceState& s, engine::TaskContext& ctx) {
                                s.batch.input = model_.input(batch);
                                s.batch.labels = s.labels;
                                const std::uint64_t done = first_iteration_ + ctx.run();
                                s.batch.epoch = done / iterations_per_epoch_;
                                s.batch.iteration = done % iterations_per_epoch_;
                                source.fill(s.batch);
                              });
  SourceState& state = graph_.state<SourceState>(tasks_.source);
  engine::TaskHandle previous = tasks_.source;
  for (PreprocessTask& p : preprocess) {
    auto task = graph_.emplace(
        std::move(p.name), engine::Arena::kCompute,
        [&state, fn = std::move(p.fn)](engine::TaskContext& ctx) { fn(state.batch, ctx); });
    previous.precede(task);
    tasks_.preprocess.push_back(task);
    previous = task;
  }

  sync::IterationTasks& hooks = tasks_.model;
  for (std::size_t l = 0; l < layers; ++l) {
    auto forward =
        graph_.emplace("forward_" + std::to_string(l), engine::Arena::kCompute,
                       [this, l, batch](engine::TaskContext&) { model_.forward_layer(l, batch); });
    previous.precede(forward);
    hooks.forward.push_back(forward);
    previous = forward;
  }
  tasks_.loss = graph_.emplace_stateful(
      "loss", engine::Arena::kCompute, LossState{},
      [this, &state, name = source_name(source)](LossState& s, engine::TaskContext&) {
        check_labels(state.batch, model_.output_size(), name);
        s.loss = model_.loss_backward(state.labels);
      });
  previous.precede(tasks_.loss);
  previous = tasks_.loss;
  hooks.backward.resize(layers);
  for (std::size_t l = layers; l-- > 0;) {
    auto backward =
        graph_.emplace("backward_" + std::to_string(l), engine::Arena::kCompute,
                       [this, l, batch](engine::TaskContext&) { model_.backward_layer(l, batch); });
    previous.precede(backward);
    hooks.backward[l] = backward;
    previous = backward;
  }
  hooks.done = graph_.emplace("done", engine::Arena::kCompute, [](engine::TaskContext&) {});
  previous.precede(hooks.done);
  stage.build(graph_, hooks);
}

void IterationGraph::save_state(engine::StateWriter& out) {
  out.write_u64(iterations());
  out.write_u64(iterations_per_epoch_);
}

void IterationGraph::load_state(engine::StateReader& in) {
  GRADMESH_CHECK_EQ(graph_.runs(), std::uint64_t{0}, "IterationGraph::load_state after a step");
  const std::uint64_t done = in.read_u64();
  const std::uint64_t per_epoch = in.read_u64();
  if (per_epoch != iterations_per_epoch_) {
    throw CheckpointError(in.source() + ": saved with " + std::to_string(per_epoch) +
                          " iterations per epoch, this job has " +
                          std::to_string(iterations_per_epoch_) +
                          " (another data set, data.train_limit, batch size or node count)");
  }
  continue_from(done);
}

void IterationGraph::continue_from(std::uint64_t done) {
  GRADMESH_CHECK_EQ(graph_.runs(), std::uint64_t{0}, "IterationGraph::continue_from after a step");
  first_iteration_ = done;
}

float IterationGraph::step() {
  executor_.run(graph_);
  return graph_.state<LossState>(tasks_.loss).loss;
}

}  // namespace gradmesh::app

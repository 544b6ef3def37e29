#include "sync/replica_average.h"

#include <algorithm>

#include "engine/graph.h"

namespace gradmesh::sync {

ReplicaAverage::ReplicaAverage(tasks::Model& model)
    : model_(model),
      parameters_(model.parameters().size()),
      input_(parameters_ + model.layer_state_size()) {
  const std::span<float> w = model_.parameters();
  std::copy(w.begin(), w.end(), input_.begin());
  model_.save_layer_states(std::span(input_).subspan(parameters_));
}

void ReplicaAverage::reduce(engine::Executor& executor, collective::RingAllReduce& ring,
                            const char* task) {
  engine::Graph graph;
  graph.emplace(task, engine::Arena::kNetwork, [&](engine::TaskContext& context) {
    ring.start(0, input_);
    ring.await(0, context.defer());
  });
  executor.run(graph);  // rethrows a peer's failure (PeerError)
}

void ReplicaAverage::write_back(const collective::RingAllReduce& ring, std::size_t nodes,
                                bool parameters) {
  const std::span<const float> sum = ring.result(0);
  const float scale = 1.0f / static_cast<float>(nodes);
  if (parameters) {
    const std::span<float> w = model_.parameters();
    for (std::size_t i = 0; i < parameters_; ++i) w[i] = sum[i] * scale;
  }
  if (input_.size() > parameters_) {
    for (std::size_t i = parameters_; i < input_.size(); ++i) input_[i] = sum[i] * scale;
    model_.load_layer_states(std::span<const float>(input_).subspan(parameters_));
  }
}

}  // namespace gradmesh::sync

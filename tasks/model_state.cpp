// The Model's state beyond its parameters and its checkpoints (engine::Checkpointable): the
// layers' own state (batch normalization's running statistics) and random streams.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "tasks/model.h"

namespace gradmesh::tasks {

std::size_t Model::layer_state_size() const noexcept {
  std::size_t total = 0;
  for (const auto& layer : layers_) total += layer->state_size();
  return total;
}

void Model::save_layer_states(std::span<float> out) {
  GRADMESH_CHECK_EQ(out.size(), layer_state_size(), "Model::save_layer_states: floats");
  for (const auto& layer : layers_) {
    layer->save_layer_state(out.first(layer->state_size()));
    out = out.subspan(layer->state_size());
  }
}

void Model::load_layer_states(std::span<const float> in) {
  GRADMESH_CHECK_EQ(in.size(), layer_state_size(), "Model::load_layer_states: floats");
  for (const auto& layer : layers_) {
    layer->load_layer_state(in.first(layer->state_size()));
    in = in.subspan(layer->state_size());
  }
}

void Model::save_state(engine::StateWriter& out) {
  out.write_floats(parameters());
  out.write_u64(layers_.size());
  for (const auto& layer : layers_) out.write_u64(layer->random_state());
  // The layers' own state (batch normalization's running statistics), when any has some: a model
  // without such layers writes what it always wrote.
  std::vector<float> state;
  for (const auto& layer : layers_) {
    if (layer->state_size() == 0) continue;
    state.resize(layer->state_size());
    layer->save_layer_state(state);
    out.write_floats(state);
  }
}

void Model::load_state(engine::StateReader& in) {
  in.read_floats(parameters());
  mark_parameters_changed();
  const std::uint64_t layers = in.read_u64();
  if (layers != layers_.size()) {
    throw CheckpointError(in.source() + ": random states of " + std::to_string(layers) +
                          " layers, this model has " + std::to_string(layers_.size()));
  }
  for (const auto& layer : layers_) layer->set_random_state(in.read_u64());
  std::vector<float> state;
  for (const auto& layer : layers_) {
    if (layer->state_size() == 0) continue;
    state.resize(layer->state_size());
    in.read_floats(state);
    layer->load_layer_state(state);
  }
}

}  // namespace gradmesh::tasks

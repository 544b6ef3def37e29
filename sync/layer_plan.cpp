#include "sync/layer_plan.h"

#include <string>

#include "net/frame.h"

namespace gradmesh::sync {

LayerPlan describe_layer(tasks::Model& model, std::size_t layer, std::string_view scheme) {
  tasks::Layer& info = model.layer(layer);
  LayerPlan row;
  row.layer = layer;
  row.name = std::string(info.kind()) + std::to_string(layer);
  row.shape = std::to_string(info.output_size()) + "x" + std::to_string(info.input_size());
  row.parameters = info.parameter_count();
  row.scheme = row.parameters == 0 ? "-" : std::string(scheme);
  return row;
}

double frame_overhead_bytes(Stage stage, MessageKind kind) {
  // Non-zero tags: FlatBuffers leaves out fields equal to their default, so 0s would under-count.
  const net::Message probe{static_cast<std::uint8_t>(stage), static_cast<std::uint16_t>(kind), 1,
                           1, net::Payload{}};
  return static_cast<double>(net::encode_data(probe)->wire_bytes());
}

}  // namespace gradmesh::sync

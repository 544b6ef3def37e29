#include "sync/layer_plan.h"

#include <string>


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

}  // namespace gradmesh::sync

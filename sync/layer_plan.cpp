#include "sync/layer_plan.h"

#include <string>

#include "tasks/shape.h"

namespace gradmesh::sync {
namespace {
// A flat shape as its feature count ("784"), any other as C x H x W ("32x28x28").
std::string describe_shape(const tasks::Shape& shape) {
  return shape.is_flat() ? std::to_string(shape.channels) : tasks::to_string(shape);
}
}  // namespace

LayerPlan describe_layer(tasks::Model& model, std::size_t layer, std::string_view scheme) {
  tasks::Layer& info = model.layer(layer);
  LayerPlan row;
  row.layer = layer;
  row.name = model.layer_name(layer);
  row.shape = describe_shape(info.input_shape()) + "->" + describe_shape(info.output_shape());
  row.parameters = info.parameter_count();
  row.scheme = row.parameters == 0 ? "-" : std::string(scheme);
  return row;
}

}  // namespace gradmesh::sync

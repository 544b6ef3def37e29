#include "tasks/layers/make_layer.h"

#include "engine/error.h"
#include "tasks/layers/dense.h"
#include "tasks/layers/relu.h"

namespace gradmesh::tasks {

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, Shape input) {
  const std::string& kind = spec.kind;
  if (kind == "dense") return std::make_unique<Dense>(input, spec.units);
  if (kind == "relu") return std::make_unique<Relu>(input);
  throw ConfigError("expected one of dense, relu (softmax_cross_entropy only last), got '" + kind +
                    "'");
}

}  // namespace gradmesh::tasks

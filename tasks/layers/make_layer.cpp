#include "tasks/layers/make_layer.h"

#include "engine/error.h"
#include "tasks/layers/avg_pool2d.h"
#include "tasks/layers/batch_norm.h"
#include "tasks/layers/conv2d.h"
#include "tasks/layers/dense.h"
#include "tasks/layers/dropout.h"
#include "tasks/layers/flatten.h"
#include "tasks/layers/layer_registry.h"
#include "tasks/layers/max_pool2d.h"
#include "tasks/layers/merge.h"
#include "tasks/layers/relu.h"

namespace gradmesh::tasks {

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, Shape input) {
  const std::string& kind = spec.kind;
  if (kind == "dense") return std::make_unique<Dense>(input, spec.units);
  if (kind == "conv2d") {
    return std::make_unique<Conv2d>(
        input, Conv2dGeometry{spec.units, spec.kernel, spec.stride, spec.padding});
  }
  if (kind == "max_pool2d") return std::make_unique<MaxPool2d>(input, spec.kernel, spec.stride);
  if (kind == "avg_pool2d") return std::make_unique<AvgPool2d>(input, spec.kernel, spec.stride);
  if (kind == "global_avg_pool") return std::make_unique<GlobalAvgPool>(input);
  if (kind == "batch_norm") return std::make_unique<BatchNorm>(input);
  if (kind == "flatten") return std::make_unique<Flatten>(input);
  if (kind == "dropout") return std::make_unique<Dropout>(input, spec.probability);
  if (kind == "relu") return std::make_unique<Relu>(input);
  if (kind == "add" || kind == "concat") {
    const Shape one[1] = {input};
    return make_layer(spec, one);  // refused: one input
  }
  if (auto layer = make_registered_layer(spec, input)) return layer;
  std::string known;
  for (const std::string_view built_in : built_in_layer_kinds()) {
    if (built_in == "softmax_cross_entropy") continue;  // the Model's loss, never made here
    known += (known.empty() ? "" : ", ") + std::string(built_in);
  }
  for (const std::string& user : registered_layers()) known += ", " + user;
  throw ConfigError("expected one of " + known + " (softmax_cross_entropy only last), got '" +
                    kind + "'");
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, std::span<const Shape> inputs) {
  if (spec.kind == "add") return std::make_unique<Add>(inputs);
  if (spec.kind == "concat") return std::make_unique<Concat>(inputs);
  if (inputs.size() != 1) {
    throw ConfigError(spec.kind + ": takes one input, got " + std::to_string(inputs.size()) +
                      " (only add and concat join several)");
  }
  return make_layer(spec, inputs[0]);
}

}  // namespace gradmesh::tasks

#pragma once
// From a parsed layer spec and the shape flowing into it to a Layer.

#include <memory>
#include <span>

#include "tasks/layers/layer.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/shape.h"

namespace gradmesh::tasks {

/// The layer `spec` describes, taking samples of shape `input` (its output shape follows from
/// it). `spec.kind` must name a layer: "dense", "conv2d", "max_pool2d", "flatten", "dropout" or
/// "relu" (not the loss), or a kind registered with register_layer (layer_registry.h). Throws
/// gradmesh::ConfigError saying what was expected when the kind is unknown or the shapes do not fit
/// (a kernel or window larger than the input, say); the message does not name the spec: the caller
/// (Model) prefixes "model.layers[i] '<spec>': ".
[[nodiscard]] std::unique_ptr<Layer> make_layer(const LayerSpec& spec, Shape input);

/// The layer `spec` describes taking inputs of the shapes `inputs` (a model graph's entry): "add"
/// and "concat" take two or more (tasks/layers/merge.h), every other kind exactly one
/// (make_layer(spec, inputs[0])). Throws gradmesh::ConfigError as above, or saying how many
/// inputs the kind takes.
[[nodiscard]] std::unique_ptr<Layer> make_layer(const LayerSpec& spec,
                                                std::span<const Shape> inputs);

}  // namespace gradmesh::tasks

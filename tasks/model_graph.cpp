// The Model's graph from its layer specs (issue 29 item 1): entries with names and inputs, the
// residual blocks a "basic_block" or "bottleneck_block" entry expands to, and the loss.

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tasks/layers/loss.h"
#include "tasks/layers/make_layer.h"
#include "tasks/model.h"

namespace gradmesh::tasks {

namespace {

/// "model.layers[i] '<spec>': ", the prefix of an entry's errors.
std::string entry_prefix(std::size_t i, const LayerSpec& spec) {
  return "model.layers[" + std::to_string(i) + "] '" + to_string(spec) + "': ";
}

}  // namespace

std::size_t Model::add_node(const LayerSpec& spec, const std::vector<std::size_t>& inputs) {
  std::vector<Shape> shapes;
  for (const std::size_t a : inputs) shapes.push_back(shapes_[a]);
  LayerSpec bare = spec;  // the layer itself: its name and inputs are the graph's
  bare.name.clear();
  bare.inputs.clear();
  layers_.push_back(make_layer(bare, shapes));
  layers_.back()->set_backend(*backend_);
  inputs_.push_back(inputs);
  for (const std::size_t a : inputs) ++consumers_[a];
  shapes_.push_back(layers_.back()->output_shape());
  consumers_.push_back(0);
  return layers_.size();  // the new layer's output: activation l + 1
}

std::size_t Model::add_residual_block(const LayerSpec& spec, std::size_t input,
                                      std::map<std::string, std::size_t>& names) {
  // He et al., CVPR'16, sec. 3.3 (option B: a projection shortcut, 1 x 1 conv with the stride,
  // where the shape changes), with batch normalization after each convolution (sec. 3.4).
  // basic_block (fig. 2): conv3x3/s - bn - relu - conv3x3 - bn, + shortcut, relu.
  // bottleneck_block (fig. 5 right, sec. 4.1, ResNet-50/101/152): conv1x1 - bn - relu -
  // conv3x3/s - bn - relu - conv1x1 (4 x the channels) - bn, + shortcut, relu; the stride on the
  // 3x3 convolution, as torchvision's ResNet-50 ("v1.5") and MLPerf's have it.
  const bool bottleneck = spec.kind == "bottleneck_block";
  const std::size_t width = spec.units, stride = spec.stride;
  const std::size_t channels = bottleneck ? 4 * width : width;
  const auto part = [&](const char* what, const std::string& text,
                        const std::vector<std::size_t>& from) {
    LayerSpec s = parse_layer_spec(text);
    try {
      const std::size_t a = add_node(s, from);
      if (!spec.name.empty()) names[spec.name + "." + what] = a;
      return a;
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("its ") + what + " '" + text + "': " + e.what());
    }
  };
  const std::string w = std::to_string(width), c = std::to_string(channels),
                    s = std::to_string(stride);
  std::size_t a = input;
  if (bottleneck) {
    a = part("conv1", "conv2d:" + w + ":1:1:0", {a});
    a = part("bn1", "batch_norm", {a});
    a = part("relu1", "relu", {a});
    a = part("conv2", "conv2d:" + w + ":3:" + s + ":1", {a});
    a = part("bn2", "batch_norm", {a});
    a = part("relu2", "relu", {a});
    a = part("conv3", "conv2d:" + c + ":1:1:0", {a});
    a = part("bn3", "batch_norm", {a});
  } else {
    a = part("conv1", "conv2d:" + c + ":3:" + s + ":1", {a});
    a = part("bn1", "batch_norm", {a});
    a = part("relu1", "relu", {a});
    a = part("conv2", "conv2d:" + c + ":3:1:1", {a});
    a = part("bn2", "batch_norm", {a});
  }
  std::size_t shortcut = input;
  if (stride != 1 || shapes_[input].channels != channels) {
    shortcut = part("projection", "conv2d:" + c + ":1:" + s + ":0", {input});
    shortcut = part("projection_bn", "batch_norm", {shortcut});
  }
  a = part("add", "add", {a, shortcut});
  return part(bottleneck ? "relu3" : "relu2", "relu", {a});
}

void Model::build_graph(const std::vector<LayerSpec>& specs) {
  // Activation 0 is the model's input; layer l's output is activation l + 1. Every entry takes
  // the entry before unless it names its inputs, which must come earlier in the list: the list
  // is the graph in topological order, so forward runs it front to back, backward back to
  // front, and each layer's gradient is ready for the sync stage in reverse topological order.
  shapes_.assign(1, input_shape_);
  consumers_.assign(1, 0);
  std::map<std::string, std::size_t> names{{"input", 0}};
  std::vector<std::size_t> entry_of(1, specs.size());  // activation -> its entry (input: none)
  std::size_t previous = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const LayerSpec& s = specs[i];
    const std::string where = entry_prefix(i, s);
    std::vector<std::size_t> inputs;
    for (const std::string& name : s.inputs) {
      const auto it = names.find(name);
      if (it != names.end()) {
        inputs.push_back(it->second);
        continue;
      }
      for (std::size_t j = i; j < specs.size(); ++j) {
        if (specs[j].name == name) {
          throw ConfigError(where + "its input '" + name + "' is model.layers[" +
                            std::to_string(j) + "]" + (j == i ? " itself" : ", later") +
                            ": every input must be an earlier entry (the list is the graph in "
                            "topological order, so no cycle can be written)");
        }
      }
      std::string known;
      for (const auto& [n, a] : names) known += (known.empty() ? "" : ", ") + n;
      throw ConfigError(where + "unknown input '" + name + "' (expected one of " + known + ")");
    }
    if (inputs.empty()) inputs.push_back(previous);
    if (s.kind == "softmax_cross_entropy" || is_registered_loss(s.kind)) {
      if (i + 1 != specs.size()) {
        throw ConfigError(where + "expected the loss '" + s.kind + "' only as the last entry");
      }
      if (inputs.size() != 1 || inputs[0] != previous) {
        throw ConfigError(where + "expected the loss to take the entry before it");
      }
      if (!shapes_[previous].is_flat()) {
        throw ConfigError(where +
                          "expected flat logits (classes x 1 x 1) from the layer before, "
                          "got " +
                          to_string(shapes_[previous]) +
                          ": end the network with 'dense:<classes>'");
      }
      try {
        loss_ = make_registered_loss(s, shapes_[previous].size());
      } catch (const ConfigError& e) {
        throw ConfigError(where + e.what());
      } catch (const std::invalid_argument& e) {
        throw ConfigError(where + e.what());
      }
      continue;
    }
    if (!s.name.empty() && names.count(s.name) != 0) {
      throw ConfigError(where + "the name '" + s.name + "' is taken by an earlier entry");
    }
    try {
      if (s.kind == "basic_block" || s.kind == "bottleneck_block") {
        if (inputs.size() != 1) {
          throw ConfigError(s.kind + ": takes one input, got " + std::to_string(inputs.size()));
        }
        previous = add_residual_block(s, inputs[0], names);
      } else {
        previous = add_node(s, inputs);
      }
    } catch (const ConfigError& e) {
      throw ConfigError(where + e.what());
    } catch (const std::invalid_argument& e) {
      throw ConfigError(where + e.what());
    }
    entry_of.resize(previous + 1, i);
    if (!s.name.empty()) names[s.name] = previous;
  }
  if (layers_.empty()) throw ConfigError("model: expected at least one layer before the loss");
  // A branch that ends nowhere would get no gradient: every output but the last feeds a layer.
  for (std::size_t a = 1; a < layers_.size(); ++a) {
    if (consumers_[a] == 0) {
      throw ConfigError(entry_prefix(entry_of[a], specs[entry_of[a]]) +
                        "its output goes nowhere: no later entry takes it (name it among a later "
                        "entry's inputs; only the last layer's output reaches the loss)");
    }
  }
}

}  // namespace gradmesh::tasks

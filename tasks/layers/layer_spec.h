#pragma once
// The model as declared in the job config: a list of strings such as
// ["conv2d:32:5:1:2", "relu", "max_pool2d:2", "flatten", "dense:10", "softmax_cross_entropy"]
// (a stack: each entry takes the one before), or a graph whose entries name their inputs:
// ["stem = conv2d:16:3:1:1", "conv2d:16:3:1:1", "batch_norm", "add <- stem", ...]
// (configs/README.md, "Model graphs").

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::tasks {

/// One parsed entry of the model list (configs/README.md, "Layers"). kind is one of
///   "dense"        units = output features (>= 1)
///   "conv2d"       units = output channels (filters, >= 1), kernel = k of the k x k kernel (>= 1),
///                  stride (>= 1, default 1), padding = zeros added on each side (default 0)
///   "max_pool2d"   kernel = the window side (>= 1), stride (>= 1, default = the window)
///   "flatten", "relu", "softmax_cross_entropy"   no fields
///   "dropout"      probability = p, the chance a unit is dropped, 0 <= p < 1
///   "add", "concat"   no fields; two or more inputs (a residual sum; channels side by side)
///   "basic_block"  units = output channels (>= 1), stride (>= 1, default 1): a residual block
///                  (He et al., CVPR'16, fig. 2) the Model expands into layers
///   "bottleneck_block"  units = the inner width C (>= 1; output channels 4 C), stride (>= 1,
///                  default 1): ResNet-50's residual block (He et al., fig. 5 right), expanded
///                  likewise
///   a kind registered with tasks::register_layer (a user's layer, tasks/layers/layer_registry.h):
///                  args = the text after "<kind>:" as written (empty when there is none)
/// Fields a kind does not use stay 0 (or empty).
struct LayerSpec {
  std::string kind;
  std::size_t units = 0;
  std::size_t kernel = 0;
  std::size_t stride = 0;
  std::size_t padding = 0;
  double probability = 0.0;
  std::string args;  ///< a registered kind's arguments, unparsed (its factory parses them)
  /// The entry's name in a model graph ("<name> = ..."), or empty: later entries name it among
  /// their inputs. "input" is the model's input and no entry's name.
  std::string name;
  /// The names of its inputs ("... <- <a> <b>"); empty: the entry before (the model's input for
  /// the first): a stack needs none.
  std::vector<std::string> inputs;
  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

/// The built-in layer kinds, in the order configs/README.md lists them, the loss
/// ("softmax_cross_entropy") last. Thread-safe (static storage).
[[nodiscard]] std::span<const std::string_view> built_in_layer_kinds() noexcept;

/// The canonical text of `spec`, every field written: "dense:256", "conv2d:32:5:1:2",
/// "max_pool2d:3:2", "dropout:0.5", "relu"; a registered kind as "<kind>[:<args>]"; a name as
/// "<name> = " before it, inputs as " <- <a> <b>" after.
/// parse_layer_spec(to_string(s)) == s. Never throws except std::bad_alloc.
[[nodiscard]] std::string to_string(const LayerSpec& spec);

/// Parses one entry, "[<name> =] <layer> [<- <input> ...]" with <layer> one of
///   "dense:<units>", "conv2d:<filters>:<kernel>[:<stride>[:<padding>]]",
///   "max_pool2d:<window>[:<stride>]", "avg_pool2d:<window>[:<stride>]", "global_avg_pool",
///   "batch_norm", "dropout:<p>", "flatten", "relu", "add", "concat",
///   "basic_block:<channels>[:<stride>]", "bottleneck_block:<channels>[:<stride>]",
///   "softmax_cross_entropy",
/// integers in decimal, p a decimal number; or "<kind>[:<args>]" for a kind registered with
/// register_layer (its args are checked when the layer is made). Surrounding spaces are ignored.
/// Reentrant. Throws std::invalid_argument saying what was expected and what came, e.g. "expected
/// 'conv2d:<filters>:<kernel>[:<stride>[:<padding>]]', got 'conv2d:0:5' (filters must be a
/// decimal integer >= 1)", or, for an unknown kind, the list of every form and registered kind.
LayerSpec parse_layer_spec(std::string_view text);

/// Parses the whole list and checks its order: at least one dense layer, and
/// softmax_cross_entropy last and only last (shapes are checked when the Model is built).
/// Reentrant. Throws std::invalid_argument naming the offending index ("model.layers[3]: ...").
std::vector<LayerSpec> parse_layer_specs(const std::vector<std::string>& texts);

}  // namespace gradmesh::tasks

#pragma once
// The model as declared in the job config: a list of strings such as
// ["dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"].

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::tasks {

/// One parsed entry of the model list. kind: "dense" | "relu" | "softmax_cross_entropy";
/// units: output features of a dense layer (>= 1), 0 for the others.
struct LayerSpec {
  std::string kind;
  std::size_t units = 0;
  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

/// The canonical text of `spec`: "dense:256", "relu". Never throws except std::bad_alloc.
[[nodiscard]] std::string to_string(const LayerSpec& spec);

/// Parses one entry: "dense:<units>" (units a decimal integer >= 1), "relu" or
/// "softmax_cross_entropy". Surrounding spaces are ignored. Reentrant. Throws
/// std::invalid_argument saying what was expected and what came, e.g. "expected 'dense:<units>',
/// 'relu' or 'softmax_cross_entropy', got 'dens:5'".
LayerSpec parse_layer_spec(std::string_view text);

/// Parses the whole list and checks its shape: at least one dense layer, and
/// softmax_cross_entropy last and only last. Reentrant. Throws std::invalid_argument naming the
/// offending index ("model.layers[3]: ...").
std::vector<LayerSpec> parse_layer_specs(const std::vector<std::string>& texts);

}  // namespace gradmesh::tasks

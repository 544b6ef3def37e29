#pragma once
// Users' own layer kinds (issue 12; DESIGN.md "Users' own pipelines"): a program registers a kind
// with a factory before it builds its Model, and the job config names it in `model.layers` like a
// built-in one ("shift:2", say), so every node builds the same model from the same config.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/layers/layer.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/shape.h"

namespace gradmesh::tasks {

/// Makes a layer of a registered kind for samples of shape `input`, from its spec (spec.kind is
/// the registered name, spec.args the text after "<kind>:", unparsed). Throws
/// gradmesh::ConfigError saying what was expected when the args or the shape do not fit; the Model
/// prefixes the message with "model.layers[i] '<spec>': ".
using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec& spec, Shape input)>;

/// Registers `kind` for parse_layer_spec and make_layer in this process. `kind` must be a name of
/// letters, digits and '_' that is neither a built-in kind (dense, conv2d, ...) nor registered
/// already; else throws gradmesh::ContractError. Thread safety: may be called from any thread
/// (a process-wide registry under a mutex); register before any Model is built from the specs.
void register_layer(std::string kind, LayerFactory factory);

/// Whether `kind` was registered by register_layer. Thread-safe.
[[nodiscard]] bool is_registered_layer(std::string_view kind);

/// The registered kinds, sorted. Thread-safe.
[[nodiscard]] std::vector<std::string> registered_layers();

/// While one lives on a thread, parse_layer_spec on that thread takes any unknown kind as a user's
/// kind ("<kind>[:<args>]", args unparsed), as if registered: for a program that checks a job
/// config on behalf of another program that registers kinds of its own (gradmesh-launch with
/// --node). Building a layer of such a kind still needs it registered. Not copyable; nests.
class AcceptUnknownLayerKinds {
 public:
  AcceptUnknownLayerKinds() noexcept;
  ~AcceptUnknownLayerKinds();
  AcceptUnknownLayerKinds(const AcceptUnknownLayerKinds&) = delete;
  AcceptUnknownLayerKinds& operator=(const AcceptUnknownLayerKinds&) = delete;
  /// Whether one lives on the calling thread.
  [[nodiscard]] static bool active() noexcept;
};

/// The layer `spec` names, from its registered factory; nullptr if spec.kind is not registered.
/// Errors: whatever the factory throws. Thread-safe.
[[nodiscard]] std::unique_ptr<Layer> make_registered_layer(const LayerSpec& spec, Shape input);

}  // namespace gradmesh::tasks

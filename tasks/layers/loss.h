#pragma once
// Users' own losses (issue 29 item 3): a program registers a loss kind with a factory before it
// builds its Model, and the job config names it as the last entry of `model.layers`
// ("label_smoothing:0.1", say) in place of "softmax_cross_entropy", so every node trains the same
// objective from the same config.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/layers/layer_spec.h"

namespace gradmesh::tasks {

/// A loss at the top of the model: from the logits of a batch and its integer labels, the mean
/// loss and its gradient wrt the logits, which starts the backward pass. Host memory always: on a
/// device model the Model downloads the logits and uploads the gradient (one copy each way per
/// iteration: batch x classes floats), so a loss is written once, in plain C++, for every backend.
/// The evaluation (Model::evaluate) reports loss(); accuracy stays argmax against the label.
///
/// Thread safety: a Loss is called from the thread driving its Model only (one at a time); it may
/// keep scratch of its own, sized in its factory (the iteration should not allocate).
class Loss {
 public:
  virtual ~Loss() = default;
  /// logits: batch x classes floats, row-major (batch = labels.size()); labels: the batch's
  /// classes, each in [0, classes) (the pipeline checks them before the loss). Writes dlogits
  /// (batch x classes, never aliasing logits) = the gradient of the returned mean loss wrt the
  /// logits, and returns that mean over the batch.
  virtual float forward_backward(std::span<const float> logits,
                                 std::span<const std::int32_t> labels, std::size_t classes,
                                 std::span<float> dlogits) = 0;
  /// The mean loss of the batch alone (evaluation): as forward_backward returns it.
  virtual float loss(std::span<const float> logits, std::span<const std::int32_t> labels,
                     std::size_t classes) = 0;
};

/// Makes the loss `spec` names (spec.kind the registered name, spec.args the text after
/// "<kind>:", unparsed) for `classes` outputs (the width of the logits). Throws
/// gradmesh::ConfigError saying what was expected when the args do not fit; the Model prefixes it
/// with "model.layers[i] '<spec>': ".
using LossFactory =
    std::function<std::unique_ptr<Loss>(const LayerSpec& spec, std::size_t classes)>;

/// Registers `kind` as a loss for parse_layer_specs and the Model in this process. `kind` must be
/// a name of letters, digits and '_' that is neither a built-in layer kind (softmax_cross_entropy
/// included) nor a registered layer or loss kind; else throws gradmesh::ContractError.
/// Thread safety: may be called from any thread (a process-wide registry under a mutex); register
/// before any config is read or Model built.
void register_loss(std::string kind, LossFactory factory);

/// Whether `kind` was registered by register_loss. Thread-safe.
[[nodiscard]] bool is_registered_loss(std::string_view kind);

/// The registered loss kinds, sorted. Thread-safe.
[[nodiscard]] std::vector<std::string> registered_losses();

/// The loss `spec` names, from its registered factory; nullptr if spec.kind is not a registered
/// loss. Errors: whatever the factory throws (ConfigError when it makes none). Thread-safe.
[[nodiscard]] std::unique_ptr<Loss> make_registered_loss(const LayerSpec& spec,
                                                         std::size_t classes);

}  // namespace gradmesh::tasks

#pragma once
// The feed-forward model one node trains: its layers, one flat parameter buffer and one flat
// gradient buffer (so the sync stage sees each layer's slice as one contiguous tensor), and the
// activation buffers of one mini-batch.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tasks/data/dataset.h"
#include "tasks/layers/layer.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/shape.h"

namespace gradmesh::tasks {

/// A stack of Layers ending in a SoftmaxCrossEntropy loss, with every buffer allocated once in the
/// constructor: forward_layer / loss_backward / backward_layer never allocate.
///
/// Memory layout: parameters() is layer 0's parameters, then layer 1's, ... contiguous
/// (parameter_offset(l) says where layer l's start; for a Dense layer they are [W (M x N) | b
/// (M)], for a Conv2d [W (F x C x k x k) | b (F)]). gradients() has the same layout. Activations
/// are NCHW (see Layer): input(batch) is batch x input_shape(); layer l's output is batch x
/// layer(l).output_shape(), which is layer l + 1's input_shape().
///
/// Per-step protocol (what forward_backward() does, and what compute tasks do one layer at a
/// time for WFBP): write input(batch); forward_layer(0..L-1, batch); loss_backward(labels);
/// backward_layer(L-1..0, batch) — after backward_layer(l) returns, layer_gradients(l) is final
/// for this step and may be sent.
///
/// Thread safety: none; one Model is driven by one thread at a time, though distinct layers'
/// parameter/gradient slices may be read by other threads once their backward step is done.
/// Moving a Model keeps all spans valid; copying is not allowed.
class Model {
 public:
  /// Builds layers from `specs` (as parse_layer_specs returns them; a trailing
  /// "softmax_cross_entropy" is the loss) for samples of shape `input_shape` (the data set's:
  /// Fashion-MNIST 1 x 28 x 28) and batches of at most `max_batch`: each layer's input shape is
  /// the previous one's output shape, and every layer's scratch is sized here (Layer::reserve).
  /// Initialises layer l from derive_seed(seed, l), so every node with the same seed holds
  /// identical weights. Starts in training mode. Throws gradmesh::ConfigError if the input shape
  /// is empty or max_batch is 0, a kind is unknown, the loss is not last, there is no layer before
  /// the loss, a layer does not fit its input (a kernel larger than the padded input, ...) or the
  /// loss's input is not flat; a layer's error reads "model.layers[i] '<spec>': <what was
  /// expected>", with the spec in canonical form (to_string(LayerSpec)).
  Model(const std::vector<LayerSpec>& specs, Shape input_shape, std::size_t max_batch,
        std::uint64_t seed);
  /// The same for flat inputs of `input_size` features (input_size x 1 x 1).
  Model(const std::vector<LayerSpec>& specs, std::size_t input_size, std::size_t max_batch,
        std::uint64_t seed);
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() = default;

  /// Number of Layers (the loss is not one).
  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_.size(); }
  /// Layer l (l < num_layers(), else gradmesh::ContractError).
  [[nodiscard]] Layer& layer(std::size_t l);
  /// Shape of one input sample.
  [[nodiscard]] const Shape& input_shape() const noexcept { return input_shape_; }
  /// Floats of one input sample (input_shape().size()).
  [[nodiscard]] std::size_t input_size() const noexcept { return input_shape_.size(); }
  /// Features of one output row (the classes of the loss).
  [[nodiscard]] std::size_t output_size() const noexcept { return layers_.back()->output_size(); }
  /// Largest batch the buffers hold.
  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }

  /// Training (true, the default) or evaluation mode for every layer (Layer::set_training): in
  /// evaluation, dropout is the identity. evaluate() switches to evaluation for its duration.
  void set_training(bool training);
  [[nodiscard]] bool training() const noexcept { return training_; }

  /// m: floats of parameters over all layers.
  [[nodiscard]] std::size_t parameter_count() const noexcept { return parameters_.size(); }
  /// All parameters, flat (see the class comment for the layout).
  [[nodiscard]] std::span<float> parameters() noexcept { return parameters_; }
  /// All gradients of the last backward pass, same layout as parameters().
  [[nodiscard]] std::span<float> gradients() noexcept { return gradients_; }
  /// Offset, in floats, of layer l's parameters in parameters(); l == num_layers() gives
  /// parameter_count(). Throws gradmesh::ContractError if l > num_layers().
  [[nodiscard]] std::size_t parameter_offset(std::size_t l) const;
  /// Layer l's slice of parameters() (empty for parameter-free layers).
  [[nodiscard]] std::span<float> layer_parameters(std::size_t l);
  /// Layer l's slice of gradients().
  [[nodiscard]] std::span<float> layer_gradients(std::size_t l);

  /// The input buffer for a batch of `batch` rows (batch x input_size()): write the batch here.
  /// Throws gradmesh::ContractError unless 1 <= batch <= max_batch().
  [[nodiscard]] std::span<float> input(std::size_t batch);
  /// Runs layer l forward on the first `batch` rows of its input activations.
  void forward_layer(std::size_t l, std::size_t batch);
  /// Loss of the last full forward against `labels` (labels.size() == that batch), and writes the
  /// gradient of the mean loss wrt the logits. Returns the mean loss (nats).
  float loss_backward(std::span<const std::int32_t> labels);
  /// Back-propagates through layer l: overwrites layer_gradients(l) and, for l > 0, the gradient
  /// wrt layer l's input. Needs loss_backward (l == num_layers() - 1) or backward_layer(l + 1).
  void backward_layer(std::size_t l, std::size_t batch);
  /// Layer l's input activations of the last forward: batch x layer(l).input_size(), row-major.
  /// For a Dense layer this is V of its sufficient factors (Poseidon ATC'17 sec. 2.1).
  [[nodiscard]] std::span<const float> layer_input(std::size_t l, std::size_t batch) const;
  /// Gradient of the mean loss wrt layer l's output, from the last backward pass (valid once
  /// backward_layer(l) may run): batch x layer(l).output_size(). For a Dense layer this is U of its
  /// sufficient factors: dW = U^T V.
  [[nodiscard]] std::span<const float> layer_output_gradient(std::size_t l, std::size_t batch) const;
  /// Logits of the last forward: batch x output_size().
  [[nodiscard]] std::span<const float> output(std::size_t batch) const;

  /// Convenience for tests and the single-node baseline: copies x (batch x input_size()) in, runs
  /// the full forward, the loss, and the full backward; returns the mean loss. batch = y.size().
  float forward_backward(std::span<const float> x, std::span<const std::int32_t> y);

  struct Evaluation {
    double loss;      ///< mean cross-entropy (nats) over the data set
    double accuracy;  ///< fraction of examples whose argmax logit is the label, in [0, 1]
  };
  /// Forward over all of `d` in batches of max_batch(), in evaluation mode (the mode is restored
  /// after); touches no gradients (but overwrites the activations). Throws gradmesh::ConfigError if d.features != input_size() or d.classes !=
  /// output_size(). An empty data set gives {0, 0}.
  Evaluation evaluate(const Dataset& d);

 private:
  void check_batch(std::size_t batch) const;

  Shape input_shape_;
  std::size_t max_batch_;
  bool training_ = true;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::size_t> offsets_;  // num_layers() + 1 entries
  std::vector<float> parameters_;
  std::vector<float> gradients_;
  std::vector<std::vector<float>> activations_;  // [0] input, [l + 1] output of layer l
  std::vector<std::vector<float>> deltas_;       // [l] d loss / d activations_[l]; [0] unused
  std::size_t forward_batch_ = 0;                // batch of the last forward_layer(L - 1)
};

}  // namespace gradmesh::tasks

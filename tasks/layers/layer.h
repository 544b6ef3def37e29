#pragma once
// The layer interface of a feed-forward model (tasks/layers/). The Model owns the parameter and
// gradient memory and hands each layer views into it (bind), so a sync strategy can ship a layer's
// gradients the moment its backward step ends (WFBP) without copies.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tasks/backend.h"
#include "tasks/shape.h"

namespace gradmesh::tasks {

/// Which layouts a layer takes and gives (Layer::layout_rule).
enum class LayoutRule : std::uint8_t {
  kNchw,     ///< NCHW in and out (the default)
  kFollows,  ///< either; the output in the inputs' layout, all alike (element-wise and
             ///< per-channel layers: relu, add, batch_norm on the CPU)
  kAdapts,   ///< any input, any output: it converts inside (conv2d on oneDNN)
  kGathers,  ///< any input, NCHW output (global_avg_pool on the CPU)
};

/// One layer of a feed-forward model. Activations are batch x C x H x W floats, contiguous and
/// row-major (NCHW): sample k's activations are the k-th run of shape.size() floats, so a flat
/// layer (dense) sees them as a batch x features row-major matrix. Each layer fixes its input
/// shape at construction and computes its output shape from it (the Model checks the chain).
///
/// Ownership: a layer owns no activation memory; parameters and gradients are views bound by the
/// owner (Model) and must outlive the layer's use. Scratch memory a layer needs per batch (im2col
/// columns, pooling argmax, dropout masks) is sized once by reserve(). Thread safety: none; one
/// layer is driven by one compute task at a time. forward/backward must not allocate.
///
/// Device: a layer computes through a Backend (tasks/backend.h): the host CPU backend
/// (cpu::host_backend()) unless its owner sets another with set_backend() before bind/reserve.
/// Every pointer and bound span a layer gets is then that backend's device memory.
class Layer {
 public:
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
  virtual ~Layer() = default;

  /// Short name of the layer type: "dense", "relu", "conv2d".
  [[nodiscard]] virtual std::string_view kind() const noexcept = 0;
  /// Shape of one input sample.
  [[nodiscard]] const Shape& input_shape() const noexcept { return input_; }
  /// Shape of one output sample.
  [[nodiscard]] const Shape& output_shape() const noexcept { return output_; }
  /// Floats of one input sample (input_shape().size()).
  [[nodiscard]] std::size_t input_size() const noexcept { return input_.size(); }
  /// Floats of one output sample (output_shape().size()).
  [[nodiscard]] std::size_t output_size() const noexcept { return output_.size(); }
  /// Whether this layer's parameter gradient is a sum of outer products of per-sample vectors,
  /// dW = U^T V with U = layer_output_gradient (batch x output_size) and V = layer_input
  /// (batch x input_size), so that sufficient-factor broadcasting can ship (U, V) instead of dW
  /// (Poseidon ATC'17 sec. 2.1; fully-connected layers: yes; convolutions: no, sec. 3.2). A layer
  /// that says yes lays out its parameters as [W (output_size x input_size) | b (output_size)].
  [[nodiscard]] virtual bool has_sufficient_factors() const noexcept { return false; }
  /// Number of trainable parameters, in floats (0 for parameter-free layers).
  [[nodiscard]] virtual std::size_t parameter_count() const noexcept { return 0; }
  /// The leading parameters weight decay applies to when optimizer.weight_decay_exclude is set
  /// (the rest are exempt: Model::weight_decay_exempt). Default: all of them; a weighted layer
  /// (dense, conv2d) its weights, not its bias; batch normalization none.
  [[nodiscard]] virtual std::size_t decayed_parameter_count() const noexcept {
    return parameter_count();
  }
  /// Floating-point operations of forward() for one sample, for the planner's estimates when
  /// nothing was measured. Default: 2 x parameter_count() (a multiply and an add per weight, as a
  /// dense layer), or 2 x input_size() for a parameter-free layer. A convolution overrides it
  /// (each weight is used at every output position).
  [[nodiscard]] virtual double forward_flops() const noexcept {
    const std::size_t p = parameter_count();
    return 2.0 * static_cast<double>(p > 0 ? p : input_size());
  }

  /// The backend forward/backward compute on; call before bind() and reserve() (scratch lives
  /// on it). The backend must outlive the layer's use. Default: cpu::host_backend().
  void set_backend(Backend& backend) noexcept { backend_ = &backend; }
  [[nodiscard]] Backend& backend() const noexcept { return *backend_; }

  /// Binds the layer to its parameters and gradients, each parameter_count() floats, laid out as
  /// the layer documents. Throws gradmesh::ContractError on a size mismatch.
  virtual void bind(std::span<float> /*parameters*/, std::span<float> /*gradients*/) {}

  /// Sizes the layer's per-batch scratch memory for batches of up to `max_batch` samples; the
  /// only place a layer allocates. Called once by the Model before the first forward; forward and
  /// backward then take any batch in [1, max_batch] (a larger one is a gradmesh::ContractError).
  virtual void reserve(std::size_t /*max_batch*/) {}

  /// Deterministic initialisation from `seed` (the Model passes derive_seed(job seed, layer
  /// index)): the bound parameters and any random stream (dropout). The same seed gives the same
  /// values on every platform.
  /// Writes the bound parameters on the host: a device model binds its host staging copy for
  /// this call, then the device copy (see Model).
  virtual void initialize(std::uint64_t /*seed*/) {}

  /// The position of the layer's random stream (dropout: the index of the next mask), saved in
  /// checkpoints so that a resumed run draws the numbers the uninterrupted one would (Poseidon
  /// arXiv'15 sec. 4.4, exact restart). Default: 0, no random stream.
  [[nodiscard]] virtual std::uint64_t random_state() const noexcept { return 0; }
  /// Restores what random_state() returned. Default: nothing.
  virtual void set_random_state(std::uint64_t /*state*/) noexcept {}

  /// Training (true, the default) or evaluation (false) mode. Only layers that behave differently
  /// care: dropout drops units in training and is the identity in evaluation; batch
  /// normalization normalizes by the batch's statistics in training, by its running ones in
  /// evaluation.
  virtual void set_training(bool /*training*/) {}

  /// Floats of state the layer keeps besides its parameters that a checkpoint must carry (batch
  /// normalization's running statistics); 0 (the default): none. Fixed after reserve().
  [[nodiscard]] virtual std::size_t state_size() const noexcept { return 0; }
  /// Copies that state into `out` (state_size() floats, host memory; a layer on a device
  /// downloads it). Throws gradmesh::ContractError for another size.
  virtual void save_layer_state(std::span<float> /*out*/) {}
  /// Replaces that state from `in` (state_size() floats, host memory). Throws
  /// gradmesh::ContractError for another size.
  virtual void load_layer_state(std::span<const float> /*in*/) {}

  /// Which activation layouts this layer takes and gives. Default kNchw. Asked after reserve().
  [[nodiscard]] virtual LayoutRule layout_rule() const noexcept { return LayoutRule::kNchw; }
  /// The layouts the Model chose for this layer's inputs (all alike) and output, within
  /// layout_rule(); called after reserve(), before the first forward (a layer made alone keeps
  /// NCHW). The default records them; a layer that converts rebuilds what depends on them.
  virtual void set_layouts(Layout input, Layout output) {
    input_layout_ = input;
    output_layout_ = output;
  }
  [[nodiscard]] Layout input_layout() const noexcept { return input_layout_; }
  [[nodiscard]] Layout output_layout() const noexcept { return output_layout_; }

  /// Asks the layer to apply a ReLU, max(0, .), to its output from now on and to take dy in
  /// backward as the gradient wrt that ReLU's output (masking it by y > 0 inside): the Model's
  /// fusion of a ReLU that takes only this layer's output (issue 55; one pass over the
  /// activation each way instead of the ReLU layer's own two). Returns whether the layer does so;
  /// false (the default) leaves it unchanged. Called at set-up, after set_layouts.
  virtual bool fuse_relu() { return false; }
  /// Whether fuse_relu() was accepted.
  [[nodiscard]] virtual bool relu_fused() const noexcept { return false; }

  /// y (batch x output_shape) = f(x (batch x input_shape)).
  virtual void forward(const float* x, float* y, std::size_t batch) = 0;

  /// Inputs this layer takes: 1, or two or more for the layers that join a graph's branches (add,
  /// concat; tasks/layers/merge.h). input_shape() is the first input's.
  [[nodiscard]] virtual std::size_t input_count() const noexcept { return 1; }
  /// forward() with every input: xs.size() == input_count() (the Model calls this one). Default:
  /// forward(xs[0], y, batch).
  virtual void forward_inputs(std::span<const float* const> xs, float* y, std::size_t batch) {
    forward(xs[0], y, batch);
  }
  /// backward() with every input and its gradient: dxs[i] (batch x input i's shape, overwritten)
  /// or nullptr when input i needs none. Default: backward(xs[0], y, dy, dxs[0], batch).
  virtual void backward_inputs(std::span<const float* const> xs, const float* y, const float* dy,
                               std::span<float* const> dxs, std::size_t batch) {
    backward(xs[0], y, dy, dxs[0], batch);
  }

  /// Whether backward() computes the parameter gradients (default true). A sync stage that
  /// rebuilds them from other data (Poseidon's SFB rebuilds dW from sufficient factors) turns it
  /// off to save the GEMM; the gradient buffer is then left untouched by backward().
  virtual void set_parameter_gradients_enabled(bool /*enabled*/) {}
  /// Whether backward() computes the parameter gradients (false only after
  /// set_parameter_gradients_enabled(false) on a layer with parameters).
  [[nodiscard]] virtual bool parameter_gradients_enabled() const noexcept { return true; }

  /// Back-propagates dy (batch x output_shape), given the x and y of the forward step just before
  /// (layers that remember something of it, such as pooling's argmax, rely on that). Overwrites
  /// (never accumulates) the bound parameter gradients and, if dx != nullptr, writes dx
  /// (batch x input_shape). dx must not alias dy.
  virtual void backward(const float* x, const float* y, const float* dy, float* dx,
                        std::size_t batch) = 0;

 protected:
  /// A layer taking samples of shape `input` and giving samples of shape `output`, computing on
  /// the host's CPU backend until set_backend.
  Layer(Shape input, Shape output) noexcept;

 private:
  Shape input_;
  Shape output_;
  Layout input_layout_ = Layout::kNchw;
  Layout output_layout_ = Layout::kNchw;
  Backend* backend_;
};

}  // namespace gradmesh::tasks

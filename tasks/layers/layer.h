#pragma once
// The layer interface of a feed-forward model (tasks/layers/). The Model owns the parameter and
// gradient memory and hands each layer views into it (bind), so a sync strategy can ship a layer's
// gradients the moment its backward step ends (WFBP) without copies.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace gradmesh::tasks {

/// One layer of a feed-forward model. Activations are row-major, batch x features floats.
///
/// Ownership: a layer owns no activation memory; parameters and gradients are views bound by the
/// owner (Model) and must outlive the layer's use. Thread safety: none; one layer is driven by one
/// compute task at a time. forward/backward must not allocate.
class Layer {
 public:
  Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
  virtual ~Layer() = default;

  /// Short name of the layer type: "dense", "relu".
  [[nodiscard]] virtual std::string_view kind() const noexcept = 0;
  /// Features of one input row.
  [[nodiscard]] virtual std::size_t input_size() const noexcept = 0;
  /// Features of one output row.
  [[nodiscard]] virtual std::size_t output_size() const noexcept = 0;
  /// Whether this layer's parameter gradient is a sum of outer products of per-sample vectors,
  /// dW = U^T V with U = layer_output_gradient (batch x output_size) and V = layer_input
  /// (batch x input_size), so that sufficient-factor broadcasting can ship (U, V) instead of dW
  /// (Poseidon ATC'17 sec. 2.1; fully-connected layers: yes; convolutions: no, sec. 3.2). A layer
  /// that says yes lays out its parameters as [W (output_size x input_size) | b (output_size)].
  [[nodiscard]] virtual bool has_sufficient_factors() const noexcept { return false; }
  /// Number of trainable parameters, in floats (0 for parameter-free layers).
  [[nodiscard]] virtual std::size_t parameter_count() const noexcept { return 0; }

  /// Binds the layer to its parameters and gradients, each parameter_count() floats, laid out as
  /// the layer documents. Throws gradmesh::ContractError on a size mismatch.
  virtual void bind(std::span<float> /*parameters*/, std::span<float> /*gradients*/) {}

  /// Deterministic initialisation of the bound parameters from `seed`: the same seed gives the
  /// same values on every platform.
  virtual void initialize(std::uint64_t /*seed*/) {}

  /// y (batch x output_size) = f(x (batch x input_size)).
  virtual void forward(const float* x, float* y, std::size_t batch) = 0;

  /// Back-propagates dy (batch x output_size), given the x and y of the forward step. Overwrites
  /// (never accumulates) the bound parameter gradients and, if dx != nullptr, writes dx
  /// (batch x input_size). dx must not alias dy.
  /// Whether backward() computes the parameter gradients (default true). A sync stage that
  /// rebuilds them from other data (Poseidon's SFB rebuilds dW from sufficient factors) turns it
  /// off to save the GEMM; the gradient buffer is then left untouched by backward().
  virtual void set_parameter_gradients_enabled(bool /*enabled*/) {}

  virtual void backward(const float* x, const float* y, const float* dy, float* dx,
                        std::size_t batch) = 0;
};

}  // namespace gradmesh::tasks

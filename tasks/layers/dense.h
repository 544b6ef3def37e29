#pragma once
// A fully connected layer: the layer Poseidon can synchronise by sufficient factors (SFB).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// Fully connected layer, input N -> output M: y = x W^T + b. The input may have any shape
/// C x H x W: it is read as N = C*H*W features (the NCHW layout of a sample is exactly what
/// flatten gives), so "flatten" before a dense layer is optional. The output is M x 1 x 1.
///
/// Parameters (and gradients, same layout), parameter_count() = M*N + M floats:
/// [ W: M x N row-major | b: M ].
/// backward: dW = dY^T X (M x N) — Poseidon's sufficient-factor form dW = U^T V with U = dY
/// (K x M) and V = X (K x N), K the batch; db = column sums of dY; dx = dY W (K x N).
/// All products go through tasks/cpu/blas.h (OpenBLAS sgemm). Thread safety: see Layer.
class Dense final : public Layer {
 public:
  /// A layer on flat inputs of `inputs` features. Throws gradmesh::ConfigError if inputs or
  /// outputs is 0.
  Dense(std::size_t inputs, std::size_t outputs);
  /// A layer on samples of shape `input` (N = input.size()). Throws gradmesh::ConfigError if
  /// input.size() or outputs is 0.
  Dense(Shape input, std::size_t outputs);

  [[nodiscard]] std::string_view kind() const noexcept override { return "dense"; }
  [[nodiscard]] bool has_sufficient_factors() const noexcept override { return true; }
  [[nodiscard]] std::size_t parameter_count() const noexcept override {
    return outputs_ * inputs_ + outputs_;
  }

  void bind(std::span<float> parameters, std::span<float> gradients) override;

  /// Glorot/Xavier uniform: W ~ U(-a, a), a = sqrt(6 / (N + M)), from SplitMix64(seed); b = 0.
  void initialize(std::uint64_t seed) override;

  void forward(const float* x, float* y, std::size_t batch) override;
  void set_parameter_gradients_enabled(bool enabled) override { parameter_gradients_ = enabled; }
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

  /// W, M x N row-major (a view into the bound parameters; empty before bind).
  [[nodiscard]] std::span<float> weights() const noexcept { return w_; }
  /// b, M floats.
  [[nodiscard]] std::span<float> bias() const noexcept { return b_; }
  /// dW, M x N row-major, from the last backward.
  [[nodiscard]] std::span<float> weight_gradients() const noexcept { return dw_; }
  /// db, M floats, from the last backward.
  [[nodiscard]] std::span<float> bias_gradients() const noexcept { return db_; }

 private:
  std::size_t inputs_;
  std::size_t outputs_;
  std::span<float> w_, b_, dw_, db_;
  bool parameter_gradients_ = true;
};

}  // namespace gradmesh::tasks

#pragma once
// A fully connected layer: the layer Poseidon can synchronise by sufficient factors (SFB).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tasks/layers/weighted_layer.h"

namespace gradmesh::tasks {

/// Fully connected layer, input N -> output M: y = x W^T + b. The input may have any shape
/// C x H x W: it is read as N = C*H*W features (the NCHW layout of a sample is exactly what
/// flatten gives), so "flatten" before a dense layer is optional. The output is M x 1 x 1.
///
/// Parameters (and gradients, same layout), parameter_count() = M*N + M floats:
/// [ W: M x N row-major | b: M ] (weights(), bias(); see WeightedLayer).
/// backward: dW = dY^T X (M x N) — Poseidon's sufficient-factor form dW = U^T V with U = dY
/// (K x M) and V = X (K x N), K the batch; db = column sums of dY; dx = dY W (K x N).
/// All products are the backend's sgemm (Layer::backend()). Thread safety: see Layer.
class Dense final : public WeightedLayer {
 public:
  /// A layer on flat inputs of `inputs` features. Throws gradmesh::ConfigError if inputs or
  /// outputs is 0.
  Dense(std::size_t inputs, std::size_t outputs);
  /// A layer on samples of shape `input` (N = input.size()). Throws gradmesh::ConfigError if
  /// input.size() or outputs is 0.
  Dense(Shape input, std::size_t outputs);

  [[nodiscard]] std::string_view kind() const noexcept override { return "dense"; }
  [[nodiscard]] bool has_sufficient_factors() const noexcept override { return true; }

  /// Glorot/Xavier uniform: W ~ U(-a, a), a = sqrt(6 / (N + M)), from SplitMix64(seed); b = 0.
  void initialize(std::uint64_t seed) override { glorot_uniform(seed, inputs_, outputs_); }

  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

 private:
  std::size_t inputs_;
  std::size_t outputs_;
};

}  // namespace gradmesh::tasks

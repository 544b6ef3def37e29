#pragma once
// What dense and convolution layers share: parameters laid out [W | b], bound as views, Glorot
// initialisation, and the switch that lets SFB skip the parameter-gradient GEMM.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// A layer whose parameters (and gradients, same layout) are [ W: weight_count floats | b:
/// bias_count floats ] in the spans the Model binds. Subclasses say what W's shape is and
/// implement initialize / forward / backward on the views below. Thread safety: see Layer.
class WeightedLayer : public Layer {
 public:
  [[nodiscard]] std::size_t parameter_count() const noexcept final {
    return weight_count_ + bias_count_;
  }
  /// W only: the bias is exempt under optimizer.weight_decay_exclude.
  [[nodiscard]] std::size_t decayed_parameter_count() const noexcept final { return weight_count_; }
  /// Floats of W and of b (W viewed as a matrix: bias_count() rows of weight_count() /
  /// bias_count() floats: a dense layer's M x N, a convolution's F x C k^2).
  [[nodiscard]] std::size_t weight_count() const noexcept { return weight_count_; }
  [[nodiscard]] std::size_t bias_count() const noexcept { return bias_count_; }
  /// Splits the bound spans at weight_count. Throws gradmesh::ContractError, naming kind(), if
  /// either does not hold parameter_count() floats.
  void bind(std::span<float> parameters, std::span<float> gradients) final;
  void set_parameter_gradients_enabled(bool enabled) final { parameter_gradients_ = enabled; }
  [[nodiscard]] bool parameter_gradients_enabled() const noexcept final {
    return parameter_gradients_;
  }

  /// W, row-major in the subclass's shape (a view into the bound parameters; empty before bind;
  /// device memory when the layer's backend is not host-addressable).
  [[nodiscard]] std::span<float> weights() const noexcept { return w_; }
  /// b, bias_count floats.
  [[nodiscard]] std::span<float> bias() const noexcept { return b_; }
  /// dW, from the last backward.
  [[nodiscard]] std::span<float> weight_gradients() const noexcept { return dw_; }
  /// db, from the last backward.
  [[nodiscard]] std::span<float> bias_gradients() const noexcept { return db_; }

 protected:
  WeightedLayer(Shape input, Shape output, std::size_t weight_count,
                std::size_t bias_count) noexcept
      : Layer(input, output), weight_count_(weight_count), bias_count_(bias_count) {}

  /// Glorot/Xavier uniform (Glorot & Bengio, AISTATS 2010): W ~ U(-a, a),
  /// a = sqrt(6 / (fan_in + fan_out)), one SplitMix64(seed) draw per weight in order; b = 0.
  /// Throws gradmesh::ContractError, naming kind(), before bind().
  void glorot_uniform(std::uint64_t seed, std::size_t fan_in, std::size_t fan_out);
  /// Whether backward() is to compute dW and db (set_parameter_gradients_enabled).
  [[nodiscard]] bool parameter_gradients() const noexcept { return parameter_gradients_; }

  std::span<float> w_, b_, dw_, db_;

 private:
  std::size_t weight_count_;
  std::size_t bias_count_;
  bool parameter_gradients_ = true;
};

}  // namespace gradmesh::tasks

#pragma once
// The layers that join branches of a model graph (issue 29 item 1): add (a residual sum) and
// concat (channels side by side). Each takes two or more inputs (Layer::input_count()), through
// forward_inputs / backward_inputs; the Model wires them from the names in model.layers.

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// A layer of two or more inputs: it computes through forward_inputs / backward_inputs only; the
/// single-input forward() and backward() are a gradmesh::ContractError.
class MergeLayer : public Layer {
 public:
  void forward(const float* x, float* y, std::size_t batch) final;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) final;

 protected:
  using Layer::Layer;
};

/// y = x_1 + x_2 + ... + x_n, every input of one shape, as a residual block's skip connection
/// (He et al., "Deep Residual Learning for Image Recognition", CVPR'16, sec. 3.2, eq. 1:
/// y = F(x) + x). Backward hands dy to every input unchanged (d y / d x_i = I). Sums in input
/// order, each add rounded on its own (Backend::accumulate), so every backend gives the same
/// bits. No parameters. Thread safety: see Layer.
class Add final : public MergeLayer {
 public:
  /// Throws gradmesh::ConfigError for fewer than 2 inputs or inputs of different shapes, naming
  /// each shape ("expected inputs of one shape, got 16x28x28 and 32x14x14").
  explicit Add(std::span<const Shape> inputs);

  [[nodiscard]] std::string_view kind() const noexcept override { return "add"; }
  /// Element-wise: any layout, its inputs' (all alike).
  [[nodiscard]] LayoutRule layout_rule() const noexcept override { return LayoutRule::kFollows; }
  [[nodiscard]] std::size_t input_count() const noexcept override { return inputs_; }
  /// Accepted on every backend: forward writes max(0, sum) (Backend::add_relu for two inputs, one
  /// pass), backward hands each input dy masked by y > 0 (the bits the add and ReLU layers give).
  bool fuse_relu() override {
    relu_ = true;
    return true;
  }
  [[nodiscard]] bool relu_fused() const noexcept override { return relu_; }
  void forward_inputs(std::span<const float* const> xs, float* y, std::size_t batch) override;
  void backward_inputs(std::span<const float* const> xs, const float* y, const float* dy,
                       std::span<float* const> dxs, std::size_t batch) override;

 private:
  std::size_t inputs_;
  bool relu_ = false;
};

/// Channel concatenation: inputs C_i x H x W (one H x W for all; flat inputs C_i x 1 x 1) give
/// (C_1 + ... + C_n) x H x W, sample by sample: sample k's output is input 1's sample k, then
/// input 2's, ... (NCHW: each input's channels are one run of C_i H W floats per sample), as
/// GoogLeNet's inception modules join their branches (Szegedy et al., CVPR'15, sec. 5). Backward
/// hands each input its run of dy. Copies only (Backend::copy_rows). No parameters. Thread
/// safety: see Layer.
class Concat final : public MergeLayer {
 public:
  /// Throws gradmesh::ConfigError for fewer than 2 inputs or inputs of different H x W.
  explicit Concat(std::span<const Shape> inputs);

  [[nodiscard]] std::string_view kind() const noexcept override { return "concat"; }
  [[nodiscard]] std::size_t input_count() const noexcept override { return sizes_.size(); }
  void forward_inputs(std::span<const float* const> xs, float* y, std::size_t batch) override;
  void backward_inputs(std::span<const float* const> xs, const float* y, const float* dy,
                       std::span<float* const> dxs, std::size_t batch) override;

 private:
  std::vector<std::size_t> sizes_;  // floats of one sample of each input
};

}  // namespace gradmesh::tasks

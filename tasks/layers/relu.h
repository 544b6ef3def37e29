#pragma once
// Rectified linear unit.

#include <cstddef>
#include <string_view>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// y = max(x, 0) elementwise, on samples of any shape (output shape = input shape); no
/// parameters. backward: dx = dy where y > 0, else 0 (the subgradient 0 at the kink). Thread
/// safety: see Layer.
class Relu final : public Layer {
 public:
  /// On flat samples of `features` floats. Throws gradmesh::ConfigError if features is 0.
  explicit Relu(std::size_t features);
  /// On samples of shape `shape`. Throws gradmesh::ConfigError if shape.size() is 0.
  explicit Relu(Shape shape);

  [[nodiscard]] std::string_view kind() const noexcept override { return "relu"; }
  /// Element-wise: any layout.
  [[nodiscard]] LayoutRule layout_rule() const noexcept override { return LayoutRule::kFollows; }

  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

 private:
  std::size_t features_;
};

}  // namespace gradmesh::tasks

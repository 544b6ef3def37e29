#pragma once
// Flatten: C x H x W samples as C*H*W features.

#include <cstddef>
#include <string_view>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// Reshapes C x H x W samples to C*H*W x 1 x 1. The NCHW layout of a sample is already the
/// flattened vector (index (c H + h) W + w), so forward and backward are plain copies (the Model
/// gives every layer its own output buffer; the copy is batch x C*H*W floats, small beside the
/// convolutions around it). Optional before a dense layer, which reads any shape flat; useful
/// for readability and before layers that care about the shape. No parameters. Thread safety:
/// see Layer.
class Flatten final : public Layer {
 public:
  /// Throws gradmesh::ConfigError if input.size() is 0.
  explicit Flatten(Shape input);

  [[nodiscard]] std::string_view kind() const noexcept override { return "flatten"; }
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;
};

}  // namespace gradmesh::tasks

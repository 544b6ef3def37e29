#pragma once
// 2-d max pooling: the subsampling step between convolutions.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// Max pooling over window x window squares of each channel, stride s, no padding:
///   y[n, c, i, j] = max_{u, v < window} x[n, c, i s + u, j s + v]
/// Input C x H x W, output C x OH x OW, OH = (H - window) / s + 1 (rounded down), OW likewise;
/// windows may overlap (s < window) or skip pixels (s > window). No parameters.
///
/// forward remembers, for every output, which input of its window was the maximum (ties: the
/// first in row-major order wins); backward routes dy there: dx = 0 except dx[argmax] += dy
/// (overlapping windows add up). So backward must follow the forward of the same batch, as the
/// Model's protocol does. Scratch: the argmax indices, max_batch x output_size() uint32s, sized
/// by reserve(). Thread safety: see Layer.
class MaxPool2d final : public Layer {
 public:
  /// Throws gradmesh::ConfigError saying what was expected if the input is empty, window or
  /// stride is 0, or the window is larger than the input (window > H or window > W).
  MaxPool2d(Shape input, std::size_t window, std::size_t stride);

  /// The output shape for `input`, `window` and `stride` (of any pooling: `kind` names the layer
  /// in the errors). Same errors as the constructor.
  [[nodiscard]] static Shape output_shape_for(Shape input, std::size_t window, std::size_t stride,
                                              std::string_view kind = "max_pool2d");

  [[nodiscard]] std::string_view kind() const noexcept override { return "max_pool2d"; }
  void reserve(std::size_t max_batch) override;
  /// Throws gradmesh::ContractError if batch exceeds what reserve() sized.
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

 private:
  std::size_t window_;
  std::size_t stride_;
  /// The geometry as Backend::max_pool_forward / backward take it.
  [[nodiscard]] PoolGeometry pool_geometry() const noexcept;

  Buffer<std::uint32_t> argmax_;  // per output: the index of its max within the input plane
};

}  // namespace gradmesh::tasks

#pragma once
// Average pooling: 2-d windows (avg_pool2d) and a whole plane (global_avg_pool, the head of a
// residual network: He, Zhang, Ren, Sun, "Deep Residual Learning for Image Recognition", CVPR'16,
// sec. 3.4 and Fig. 3, "global average pooling" before the classifier; Lin, Chen, Yan, "Network
// in Network", ICLR'14, sec. 3.2).

#include <cstddef>
#include <string_view>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// Average pooling over window x window squares of each channel, stride s, no padding:
///   y[n, c, i, j] = (1 / window^2) sum_{u, v < window} x[n, c, i s + u, j s + v]
/// Input C x H x W, output C x OH x OW, OH = (H - window) / s + 1 (rounded down), OW likewise.
/// backward: dx[n, c, i s + u, j s + v] += dy[n, c, i, j] / window^2 (overlapping windows add;
/// inputs no window covers get 0). No parameters, no scratch: backward needs neither x nor y.
/// Thread safety: see Layer.
class AvgPool2d final : public Layer {
 public:
  /// Throws gradmesh::ConfigError saying what was expected if the input is empty, window or
  /// stride is 0, or the window is larger than the input (window > H or window > W).
  AvgPool2d(Shape input, std::size_t window, std::size_t stride);

  [[nodiscard]] std::string_view kind() const noexcept override { return "avg_pool2d"; }
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

 private:
  [[nodiscard]] PoolGeometry pool_geometry() const noexcept;
  std::size_t window_;
  std::size_t stride_;
};

/// Global average pooling: each channel's H x W plane to its mean,
///   y[n, c] = (1 / (H W)) sum_{h, w} x[n, c, h, w],   dx[n, c, h, w] = dy[n, c] / (H W).
/// Input C x H x W (any H, W), output C x 1 x 1. Both directions are one GEMM with a vector of
/// H W ones on the layer's backend (forward: the planes times the ones; backward: dy times the
/// ones' transpose), so the CPU and a device compute it alike. No parameters; scratch: the ones,
/// H W floats, set by reserve(). Thread safety: see Layer.
class GlobalAvgPool final : public Layer {
 public:
  /// Throws gradmesh::ConfigError if the input is empty.
  explicit GlobalAvgPool(Shape input);

  [[nodiscard]] std::string_view kind() const noexcept override { return "global_avg_pool"; }
  /// On the CPU backend: a blocked input too (its output is C floats a sample: NCHW).
  [[nodiscard]] LayoutRule layout_rule() const noexcept override {
    return backend().host_addressable() ? LayoutRule::kGathers : LayoutRule::kNchw;
  }
  void reserve(std::size_t max_batch) override;
  /// Throws gradmesh::ContractError before reserve().
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

 private:
  Buffer<float> ones_;  // H W ones on the backend
};

}  // namespace gradmesh::tasks

#pragma once
// A 2-d convolution layer: the layer Poseidon keeps on the parameter server, since its gradient
// has no sufficient factors (Poseidon ATC'17 sec. 3.2).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tasks/layers/weighted_layer.h"

namespace gradmesh::tasks {

/// Geometry of a square-kernel 2-d convolution.
struct Conv2dGeometry {
  std::size_t filters = 1;  ///< F, output channels
  std::size_t kernel = 1;   ///< k: each filter is C x k x k
  std::size_t stride = 1;   ///< s, the step between output positions, in input pixels
  std::size_t padding = 0;  ///< p, zeros added on each side of the input's H and W
};

/// 2-d convolution (cross-correlation, as the DL frameworks compute it) of C x H x W samples with
/// F filters of C x k x k, stride s, zero padding p:
///   y[n, f, i, j] = b[f] + sum_{c, u, v} W[f, c, u, v] x[n, c, i s - p + u, j s - p + v]
/// (x read as 0 outside the input). Output F x OH x OW, OH = (H + 2p - k) / s + 1 (rounded
/// down), OW likewise.
///
/// Parameters (and gradients, same layout), parameter_count() = F C k k + F floats:
/// [ W: F x C x k x k row-major | b: F ] (weights(), bias(); see WeightedLayer).
/// forward, per sample n: col = im2col(x_n) (C k k x OH OW), y_n (F x OH OW) = W col + b — one
/// cpu::sgemm (Chellapilla et al., "High performance convolutional neural networks for document
/// processing", 2006; Caffe's layout).
/// backward, per sample: dW += dY_n col^T (one sgemm; the first sample overwrites), db = sums of
/// dY over samples and positions, dcol = W^T dY_n (one sgemm), dx_n = col2im(dcol). dW is a sum
/// over samples *and positions*, not of per-sample outer products: has_sufficient_factors() is
/// false (Poseidon ATC'17 sec. 3.2), so SFB never takes this layer.
///
/// Scratch: col and dcol, C k k x OH OW floats each, allocated in the constructor (one sample at
/// a time, so independent of the batch); forward/backward never allocate. Thread safety: see
/// Layer.
class Conv2d final : public WeightedLayer {
 public:
  /// Throws gradmesh::ConfigError saying what was expected if the input is empty, a geometry
  /// field is 0 (padding may be 0), or the kernel is larger than the padded input
  /// (k > H + 2p or k > W + 2p).
  Conv2d(Shape input, Conv2dGeometry geometry);

  /// The output shape for `input` and `geometry`: F x OH x OW. Same errors as the constructor.
  [[nodiscard]] static Shape output_shape_for(Shape input, Conv2dGeometry geometry);

  [[nodiscard]] std::string_view kind() const noexcept override { return "conv2d"; }
  /// 2 F C k k OH OW + F OH OW: a multiply and an add per weight per output position, and the
  /// bias.
  [[nodiscard]] double forward_flops() const noexcept override;

  /// Glorot/Xavier uniform with the receptive field counted: W ~ U(-a, a),
  /// a = sqrt(6 / (C k k + F k k)), from SplitMix64(seed); b = 0.
  void initialize(std::uint64_t seed) override;

  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

  [[nodiscard]] const Conv2dGeometry& geometry() const noexcept { return geometry_; }

 private:
  /// col (patch_ x positions_) = the receptive fields of one sample x (C x H x W).
  void im2col(const float* x, float* col) const noexcept;
  /// dx (C x H x W) = the sum of dcol (patch_ x positions_) back over the receptive fields.
  void col2im(const float* dcol, float* dx) const noexcept;

  Conv2dGeometry geometry_;
  std::size_t patch_;      // C k k, rows of col
  std::size_t positions_;  // OH OW, columns of col
  std::vector<float> col_, dcol_;
};

}  // namespace gradmesh::tasks

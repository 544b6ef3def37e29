#pragma once
// A 2-d convolution layer: the layer Poseidon keeps on the parameter server, since its gradient
// has no sufficient factors (Poseidon ATC'17 sec. 3.2).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

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
/// forward, for a chunk of S samples at a time: col = [im2col(x_1) | ... | im2col(x_S)]
/// (C k k x S OH OW), out = W col (F x S OH OW) — one backend sgemm per chunk (Chellapilla et al.,
/// "High performance convolutional neural networks for document processing", 2006; Caffe's
/// layout) — then y_n = sample n's columns of out + b.
/// backward, per chunk: dY gathered the same way, dW (+)= dY col^T (one sgemm), db = sums of dY
/// over samples and positions, dcol = W^T dY (one sgemm), dx_n = col2im(sample n's columns of
/// dcol). The chunks run through Backend::run_chunks, side by side on the CPU backend's threads
/// (each chunk's im2col, GEMM and scatter on one thread, on its own slot of the scratch); for
/// backward the chunks form gradient_groups(batch) contiguous groups, each summing its chunks'
/// dW and db in order (the first chunk overwrites), and the groups' sums are added in group
/// order: the same bits for any thread count. dW is a sum over samples *and positions*, not
/// of per-sample outer products: has_sufficient_factors() is false (Poseidon ATC'17 sec. 3.2), so
/// SFB never takes this layer.
///
/// On a backend with convolution kernels of its own (Backend::make_convolution: oneDNN's on the
/// CPU backend, compute.cpu_kernels = "onednn") forward and backward hand the whole batch to them
/// instead, and none of the chunks, columns or groups below exist (samples_per_gemm() is the
/// batch, gradient_groups() 1).
///
/// Scratch, sized by reserve(max_batch): per slot (Backend::chunk_slots() at reserve, at most the
/// chunks) col (C k k x S OH OW floats, reused for dcol) and out (F x S OH OW), with S =
/// min(max_batch, column_budget / (C k k OH OW)) but at least 1, so a GEMM multiplies several
/// samples at once while col stays near column_budget floats; and groups - 1 partial sums of dW
/// and db. forward and backward never allocate. Thread safety: see Layer.
class Conv2d final : public WeightedLayer {
 public:
  /// Default column_budget: 2^19 floats (2 MiB) of im2col columns per GEMM, about one core's
  /// L2 on the machines we measure on, so the GEMM reads the columns im2col just wrote from cache
  /// (the ResNet of configs/fashion-mnist-resnet.toml: 0.26-0.32 of sgemm at 8 MiB, 0.34-0.35 at 2
  /// MiB; the CNN within its spread; bench_single_node, 2026-11-28).
  static constexpr std::size_t kColumnBudget = std::size_t{1} << 19;

  /// Throws gradmesh::ConfigError saying what was expected if the input is empty, a geometry
  /// field is 0 (padding may be 0), or the kernel is larger than the padded input
  /// (k > H + 2p or k > W + 2p). column_budget: see the class comment.
  Conv2d(Shape input, Conv2dGeometry geometry, std::size_t column_budget = kColumnBudget);

  /// The output shape for `input` and `geometry`: F x OH x OW. Same errors as the constructor.
  [[nodiscard]] static Shape output_shape_for(Shape input, Conv2dGeometry geometry);

  [[nodiscard]] std::string_view kind() const noexcept override { return "conv2d"; }
  /// 2 F C k k OH OW + F OH OW: a multiply and an add per weight per output position, and the
  /// bias.
  [[nodiscard]] double forward_flops() const noexcept override;

  /// Glorot/Xavier uniform with the receptive field counted: W ~ U(-a, a),
  /// a = sqrt(6 / (C k k + F k k)), from SplitMix64(seed); b = 0.
  void initialize(std::uint64_t seed) override;

  void reserve(std::size_t max_batch) override;
  /// kAdapts on a backend with its own convolution kernels (oneDNN's: they read and write either
  /// layout), else kNchw.
  [[nodiscard]] LayoutRule layout_rule() const noexcept override {
    return kernels_ != nullptr ? LayoutRule::kAdapts : LayoutRule::kNchw;
  }
  void set_layouts(Layout input, Layout output) override;
  /// Throws gradmesh::ContractError before reserve() or for a batch above reserve's (forward and
  /// backward).
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

  [[nodiscard]] const Conv2dGeometry& geometry() const noexcept { return geometry_; }
  /// S, samples per GEMM (0 before reserve()).
  [[nodiscard]] std::size_t samples_per_gemm() const noexcept { return chunk_; }

  /// Backward's chunks are summed in at most this many groups (see the class comment).
  static constexpr std::size_t kGradientGroups = 4;
  /// The groups backward sums a batch's chunks in: min(chunks, kGradientGroups, 1 + column_budget
  /// / (F C k k)), at least 1 (0 before reserve()). Each group after the first keeps its own sum of
  /// dW, so those sums stay within the column budget: a layer whose dW alone exceeds it
  /// (ResNet-18's 256- and 512-channel stages) sums in one group, its backward's chunks in turn,
  /// each GEMM on OpenBLAS's threads.
  [[nodiscard]] std::size_t gradient_groups(std::size_t batch) const noexcept;

 private:
  /// The chunks of S samples a batch of `batch` takes (the last may be short); chunk_ > 0.
  [[nodiscard]] std::size_t chunk_count(std::size_t batch) const noexcept {
    return (batch + chunk_ - 1) / chunk_;
  }
  [[nodiscard]] std::size_t col_floats() const noexcept { return patch_ * positions_ * chunk_; }
  [[nodiscard]] std::size_t out_floats() const noexcept {
    return geometry_.filters * positions_ * chunk_;
  }

  /// The input and output geometry as Backend::im2col / col2im take it.
  [[nodiscard]] Im2colGeometry im2col_geometry() const noexcept;

  Conv2dGeometry geometry_;
  std::size_t patch_;          // C k k, rows of col
  std::size_t positions_;      // OH OW, columns of col
  std::size_t column_budget_;  // floats
  std::size_t max_batch_ = 0;  // reserve's
  std::size_t chunk_ = 0;      // S, samples per GEMM
  std::size_t slots_ = 1;      // chunks run at once (Backend::chunk_slots), each its own scratch
  Buffer<float> col_;          // slots x (C k k x S OH OW): im2col columns, then dcol
  Buffer<float> out_;          // slots x (F x S OH OW): the GEMM's output, or the gathered dY
  Buffer<float> dw_partials_;  // groups - 1 sums of dW (group 0 sums into dW itself)
  Buffer<float> db_partials_;  // groups - 1 sums of db
  std::unique_ptr<ConvolutionKernels> kernels_;  // the backend's own (oneDNN), or null: im2col
};

}  // namespace gradmesh::tasks

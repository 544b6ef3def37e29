#pragma once
// Batch normalization (Ioffe and Szegedy, "Batch Normalization: Accelerating Deep Network Training
// by Reducing Internal Covariate Shift", ICML'15, Alg. 1 and 2; sec. 3.2 for convolutions: one
// mean and variance per channel over the batch and the positions).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// How a node's synchronized batch normalization layers (SyncBN) see every node's figures: an
/// all-gather of a few floats per layer, twice per iteration (forward: each node's count, batch
/// mean and variance per channel; backward: its per-channel sums of dy and dy x_hat). The job's
/// nodes hold one model (a BSP strategy), so every node runs the same layers in the same order
/// and calls all_gather the same number of times in the same order.
class BatchStatisticsExchange {
 public:
  virtual ~BatchStatisticsExchange() = default;
  /// Writes every node's `mine` (host memory, the same count of floats on every node) into `all`
  /// (nodes() x mine.size() floats, host; row r rank r's), the same on every node. Blocks until
  /// every node's is in. Throws gradmesh::PeerError naming a failed or silent peer.
  virtual void all_gather(std::span<const float> mine, std::span<float> all) = 0;
  /// The job's nodes (>= 1).
  [[nodiscard]] virtual std::size_t nodes() const noexcept = 0;
};

/// Batch normalization of each channel: for a C x H x W input over the batch's N x H x W values of
/// the channel (2-d, after a convolution), for a flat F x 1 x 1 input over the batch's N values of
/// each feature (1-d, after a dense layer):
///   training:   y = gamma[c] (x - mu_B[c]) / sqrt(var_B[c] + eps) + beta[c]
///               (mu_B, var_B: the batch's mean and biased variance; Alg. 1), and the running
///               statistics r_mu = (1 - m) r_mu + m mu_B, r_var = (1 - m) r_var + m M/(M - 1)
///               var_B (M = N H W; PyTorch's unbiased running variance, momentum m = 0.1)
///   evaluation: y = gamma[c] (x - r_mu[c]) / sqrt(r_var[c] + eps) + beta[c]   (Alg. 2)
/// eps = 1e-5. Parameters [gamma (C) | beta (C)], initialized to 1 and 0; running statistics to
/// 0 and 1. backward follows the training forward of the same batch (it uses that batch's
/// statistics): dbeta = sum dy, dgamma = sum dy x_hat,
/// dx = gamma / sqrt(var_B + eps) (dy - dbeta / M - x_hat dgamma / M).
///
/// Statistics are the node's own batch's by default (per-node, as PyTorch DDP's BatchNorm), or,
/// with set_statistics_exchange (model.sync_batch_norm, SyncBN as torch.nn.SyncBatchNorm), the
/// global batch's over all nodes: the forward gathers each node's count M_r, mean and variance
/// and combines them exactly (mu = sum M_r mu_r / M, var = sum M_r (var_r + (mu_r - mu)^2) / M,
/// M = sum M_r, in rank order: the same on every node), and the backward gathers each node's
/// dbeta_r and dgamma_r and uses their sums over M in dx, so n nodes of K samples compute what
/// one node of n K does (its gradients n times a node's, the sync stage's mean undoing it); a
/// node's own dgamma, dbeta stay its share. The running statistics then agree on every node.
/// Kernels: the backend's own where it has them (Backend::make_batch_norm: oneDNN's primitives
/// on the CPU with compute.cpu_kernels = "onednn", which also fuse a following ReLU, fuse_relu),
/// else the backend's batch_norm_* loops (and, on the CPU's blocked layout, tasks/cpu/
/// blocked_kernels.h); SyncBN always runs on the loops (its statistics are combined between the
/// passes).
/// The running statistics are the layer's state (state_size() = 2C: r_mu, then
/// r_var), carried by checkpoints. Scratch: the batch's mean, variance and 1 / std, C floats each,
/// and the running statistics, on the layer's backend. Thread safety: see Layer.
class BatchNorm final : public Layer {
 public:
  static constexpr float kMomentum = 0.1f;
  static constexpr float kEpsilon = 1e-5f;

  /// Throws gradmesh::ConfigError if the input is empty.
  explicit BatchNorm(Shape input);

  [[nodiscard]] std::string_view kind() const noexcept override { return "batch_norm"; }
  [[nodiscard]] std::size_t parameter_count() const noexcept override { return 2 * channels_; }
  /// None: gamma and beta are exempt under optimizer.weight_decay_exclude.
  [[nodiscard]] std::size_t decayed_parameter_count() const noexcept override { return 0; }
  /// About 8 flops a value each way (normalize, scale, shift; the statistics).
  [[nodiscard]] double forward_flops() const noexcept override {
    return 8.0 * static_cast<double>(input_size());
  }
  /// Throws gradmesh::ContractError unless both spans hold parameter_count() floats.
  void bind(std::span<float> parameters, std::span<float> gradients) override;
  void reserve(std::size_t max_batch) override;
  /// gamma = 1, beta = 0 (the bound host parameters); running mean 0, running variance 1.
  void initialize(std::uint64_t seed) override;
  void set_training(bool training) override { training_ = training; }
  /// Per channel: on the CPU backend NCHW or oneDNN's blocked layout, the output in the input's;
  /// elsewhere NCHW.
  [[nodiscard]] LayoutRule layout_rule() const noexcept override {
    return backend().host_addressable() ? LayoutRule::kFollows : LayoutRule::kNchw;
  }
  /// On the backend's own kernels (Backend::make_batch_norm: oneDNN's on the CPU), the kernels
  /// are told the layout too.
  void set_layouts(Layout input, Layout output) override;
  /// Accepted where the backend has its own kernels (oneDNN's fuse_norm_relu); false on the
  /// builtin loops (nothing to gain there). Once fused, SyncBN's path applies the ReLU itself
  /// (its backward masks dy into a scratch activation, allocated here or by
  /// set_statistics_exchange).
  bool fuse_relu() override;
  [[nodiscard]] bool relu_fused() const noexcept override { return relu_; }
  [[nodiscard]] bool training() const noexcept { return training_; }
  /// Throws gradmesh::ContractError before reserve().
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

  /// Synchronizes the training statistics over the nodes through `exchange` (SyncBN, see the
  /// class comment); nullptr: the node's own batch again. `exchange` must outlive the layer's
  /// training passes. Allocates the scratch it needs: host (2C + 1) x (nodes + 1) floats, and on
  /// the backend 5 C floats and one input activation of max_batch samples. Call after reserve,
  /// from the thread driving the model, while no pass runs. Throws gradmesh::ContractError
  /// before reserve().
  void set_statistics_exchange(BatchStatisticsExchange* exchange);

  [[nodiscard]] std::size_t state_size() const noexcept override { return 2 * channels_; }
  void save_layer_state(std::span<float> out) override;
  void load_layer_state(std::span<const float> in) override;

 private:
  /// y = gamma (x - mean) inv_std + beta per channel, in the input's layout.
  void normalize(const float* x, std::size_t batch, const float* mean, const float* inv_std,
                 const float* gamma, const float* beta, float* y);
  std::size_t channels_;
  std::size_t spatial_;  // H W: 1 for a flat input
  bool training_ = true;
  std::span<float> gamma_, beta_, dgamma_, dbeta_;
  Buffer<float> mean_, var_, inv_std_;  // the last training batch's (backward uses them)
  Buffer<float> running_mean_, running_var_;
  Buffer<float> eval_inv_std_;  // 1 / sqrt(r_var + eps) for an evaluation forward
  std::size_t max_batch_ = 0;

  // SyncBN (set_statistics_exchange): host scratch for the gathers, backend coefficients.
  /// Forward: the gathered statistics into mean_ and var_ (on the backend); returns M.
  float combine_statistics(float local_count);
  /// Backward: dx from the gathered sums (dgamma_, dbeta_ hold this node's share).
  void global_input_gradient(const float* x, const float* dy, float* dx, std::size_t batch);
  std::unique_ptr<BatchNormKernels> kernels_;  // the backend's own (oneDNN), or null: the loops
  bool relu_ = false;                          // fuse_relu() accepted
  Buffer<float> masked_dy_;                    // fused, on the loops (SyncBN): dy masked by y > 0
  BatchStatisticsExchange* exchange_ = nullptr;
  float global_count_ = 0;  // M of the last synchronized training forward
  std::vector<float> mine_, all_, host_a_, host_b_;
  Buffer<float> zeros_, ones_, coef_a_, coef_g_, coef_b_, scratch_;
};

}  // namespace gradmesh::tasks

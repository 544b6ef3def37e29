#pragma once
// Inverted dropout (Srivastava et al., "Dropout: a simple way to prevent neural networks from
// overfitting", JMLR 2014), with a seeded mask so that runs stay reproducible.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// In training mode, drops each unit with probability p and scales the kept ones by 1 / (1 - p)
/// (inverted dropout: the expected output equals the input, so evaluation needs no rescaling):
/// y = x * m, m = 0 with probability p, else 1 / (1 - p); backward dx = dy * m with the m of the
/// last forward. In evaluation mode (set_training(false), as Model::evaluate sets) y = x and
/// dx = dy. Any shape; output shape = input shape; no parameters.
///
/// Reproducibility: the mask of the t-th training-mode forward since initialize(seed) (t = 0, 1,
/// ...; step() says which is next) is drawn from SplitMix64(derive_seed(seed, t)), one number per
/// unit in NCHW order; the Model passes seed = derive_seed(job seed, layer index). So the same
/// job seed gives the same masks on every platform and every node (each node's rows are other
/// samples). Scratch: the mask, max_batch x input_size() floats, sized by reserve(). Thread
/// safety: see Layer.
class Dropout final : public Layer {
 public:
  /// Throws gradmesh::ConfigError if shape.size() is 0 or p is not in [0, 1).
  Dropout(Shape shape, double p);

  [[nodiscard]] std::string_view kind() const noexcept override { return "dropout"; }
  [[nodiscard]] double probability() const noexcept { return p_; }
  void reserve(std::size_t max_batch) override;
  /// Sets the seed of the masks and rewinds step() to 0.
  void initialize(std::uint64_t seed) override;
  void set_training(bool training) override { training_ = training; }
  [[nodiscard]] bool training() const noexcept { return training_; }
  /// Index of the mask the next training-mode forward draws.
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  /// Makes the next training-mode forward draw mask `step` (to replay a step, or to hold the mask
  /// fixed in a gradient check).
  void set_step(std::uint64_t step) noexcept { step_ = step; }
  /// step(), for checkpoints.
  [[nodiscard]] std::uint64_t random_state() const noexcept override { return step_; }
  void set_random_state(std::uint64_t state) noexcept override { step_ = state; }
  /// The multipliers m of the last training-mode forward: batch x input_size() floats, each 0 or
  /// 1 / (1 - p). Host memory only: throws gradmesh::ContractError on a device backend.
  [[nodiscard]] std::span<const float> mask(std::size_t batch) const;

  /// Throws gradmesh::ContractError if batch exceeds what reserve() sized.
  void forward(const float* x, float* y, std::size_t batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx,
                std::size_t batch) override;

 private:
  double p_;
  float scale_;  // 1 / (1 - p)
  std::uint64_t seed_ = 0;
  std::uint64_t step_ = 0;
  bool training_ = true;
  bool masked_ = false;  // whether the last forward applied mask_
  Buffer<float> mask_;   // backend memory
};

}  // namespace gradmesh::tasks

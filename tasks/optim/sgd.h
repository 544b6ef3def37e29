#pragma once
// Stochastic gradient descent with momentum and weight decay, as PyTorch's torch.optim.SGD
// (dampening 0, no Nesterov).

#include <cstddef>
#include <span>

namespace gradmesh::tasks {

/// Options of Sgd, as in the job config. lr: learning rate (>= 0); momentum: mu in [0, 1);
/// weight_decay: L2 coefficient (>= 0).
struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

/// The update Sgd::step applies, on raw arrays of n floats: for i < n, g' = g[i] + wd w[i];
/// v = mu velocity[i] + g'; velocity[i] = v; w[i] -= lr v, each a separately rounded float
/// operation in this order. Sgd::step and the CPU backend's Backend::sgd_step both run this one
/// loop, so they agree bit for bit. No checks (the callers check sizes); no allocation; w and
/// velocity are written, g may not alias them. Thread safety: as the arrays.
///
/// `check_finite` (the non-finite guard, tasks/optim/non_finite.h): the same loop also tests each
/// updated w[i] for NaN or Inf (an integer test of the exponent bits, OR-reduced: vectorized, no
/// second pass over memory; the values written are the same bits either way). Returns false when
/// it was asked to check and a w[i] is not finite (a non-finite g, velocity or overflow), else
/// true.
bool sgd_update(float* w, const float* g, float* velocity, std::size_t n, const SgdOptions& options,
                bool check_finite = false) noexcept;

/// scratch = scale * (grads[0] + grads[1] + ...), summed in the given order (the same bits on
/// every node), then scaled. Sizes are the caller's (checked by Sgd::step_sum). No allocation.
void sum_gradients(std::span<const std::span<const float>> grads, float scale,
                   std::span<float> scratch) noexcept;

/// PyTorch-style SGD: g' = g + wd * w; v = mu * v + g'; w -= lr * v (v starts at 0, which gives
/// PyTorch's first step v = g'). Stateless apart from its options: the caller owns the velocity
/// buffer, so one Sgd may step many disjoint slices (one per layer or KV chunk) concurrently.
/// Thread safety: const methods; concurrent calls on disjoint buffers are safe. No allocation.
class Sgd {
 public:
  /// Throws gradmesh::ConfigError naming the option if lr < 0, momentum outside [0, 1), or
  /// weight_decay < 0 (or any is not finite).
  explicit Sgd(SgdOptions o);
  /// An Sgd whose steps also test the updated parameters (sgd_update's check_finite) and return
  /// whether they are all finite. Throws as Sgd(o).
  Sgd(SgdOptions o, bool check_finite);

  /// One step on w with gradient g and momentum buffer velocity (all the same number of floats,
  /// else gradmesh::ContractError): sgd_update(). Returns false when this Sgd checks finiteness
  /// and an updated parameter is NaN or Inf, else true.
  bool step(std::span<float> w, std::span<const float> g, std::span<float> velocity) const;
  /// step() with learning rate `lr` in place of options().lr (a schedule's rate, >= 0).
  bool step(std::span<float> w, std::span<const float> g, std::span<float> velocity,
            float lr) const;

  /// Sums `grads` (n spans of w.size() floats, summed in the given order so every node gets the
  /// same bits), multiplies by `scale` (e.g. 1/n for the mean over n nodes), then steps as step().
  /// The sum is written into `scratch` (w.size() floats), which is left holding the scaled sum.
  /// Throws gradmesh::ContractError if grads is empty or a size differs. Returns as step().
  bool step_sum(std::span<float> w, std::span<const std::span<const float>> grads, float scale,
                std::span<float> velocity, std::span<float> scratch) const;
  /// step_sum() with learning rate `lr` in place of options().lr.
  bool step_sum(std::span<float> w, std::span<const std::span<const float>> grads, float scale,
                std::span<float> velocity, std::span<float> scratch, float lr) const;

  /// The options this optimizer was built with.
  [[nodiscard]] const SgdOptions& options() const noexcept { return options_; }

 private:
  SgdOptions options_;
  bool check_finite_ = false;
};

}  // namespace gradmesh::tasks

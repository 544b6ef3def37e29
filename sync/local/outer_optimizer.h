#pragma once
// The outer step of local SGD (DiLoCo, Douillard et al., arXiv 2311.08105, Algorithm 1): after H
// inner steps the nodes' mean change Delta = theta_round_start - theta (the "outer gradient") is
// applied to theta_round_start by an outer optimizer. DiLoCo's is SGD with Nesterov momentum, lr
// 0.7, momentum 0.9 (sec. 3, Table 2); plain periodic averaging (lr 1, no momentum) is local SGD
// as Stich ("Local SGD Converges Fast and Communicates Little", ICLR'19) and Lin et al. ("Don't
// Use Large Mini-Batches, Use Local SGD", ICLR'20) run it.

#include <cstddef>
#include <span>
#include <vector>

#include "engine/checkpoint.h"
#include "sync/local/options.h"

namespace gradmesh::sync {

/// The outer optimizer's state (the outer velocity, n floats) and its step. The Nesterov step is
/// PyTorch's SGD(nesterov=True) on the pseudo-gradient d (as DiLoCo's reference code uses it):
///   v = mu v + d;  theta -= lr (d + mu v).
/// "sgd": v = mu v + d; theta -= lr v. "average": theta -= d (so theta becomes the nodes' mean).
///
/// Thread safety: none (the stage's outer task). Errors: ContractError for sizes that differ.
/// Checkpoints: the velocity, bit for bit (CheckpointError for another size).
class OuterOptimizer final : public engine::Checkpointable {
 public:
  /// For `floats` parameters; the velocity starts at 0.
  OuterOptimizer(OuterKind kind, double lr, double momentum, std::size_t floats);

  /// theta (the round's start, `floats` floats) stepped by the mean pseudo-gradient `delta`.
  void step(std::span<float> theta, std::span<const float> delta);

  [[nodiscard]] OuterKind kind() const noexcept { return kind_; }
  [[nodiscard]] std::span<const float> velocity() const noexcept { return velocity_; }

  void save_state(engine::StateWriter& out) override;
  void load_state(engine::StateReader& in) override;

 private:
  OuterKind kind_;
  float lr_, momentum_;
  std::vector<float> velocity_;  // empty for "average"
};

}  // namespace gradmesh::sync

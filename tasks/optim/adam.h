#pragma once
// Adam and AdamW (issue 29 item 3): Kingma and Ba, "Adam: A Method for Stochastic Optimization",
// ICLR'15, Algorithm 1, with L2 weight decay folded into the gradient as torch.optim.Adam; and
// Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR'19, Algorithm 2 (AdamW):
// the decay applied to the weights, not through the moments, as torch.optim.AdamW.

#include <cstddef>
#include <cstdint>

namespace gradmesh::tasks {

/// Adam's constants, as in the job config (optimizer.beta1, .beta2, .eps): beta1, beta2 in
/// [0, 1), eps > 0. `decoupled`: AdamW.
struct AdamOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  bool decoupled = false;
};

/// One step's scalars: the learning rate, the weight decay, and the bias corrections of step t
/// (1-based), c1 = 1 - beta1^t and c2 = 1 - beta2^t (computed once per step in double, then
/// rounded: every node and backend uses the same floats).
struct AdamStep {
  float lr = 0.0f;
  float weight_decay = 0.0f;
  float correction1 = 1.0f;
  float correction2 = 1.0f;
};

/// The scalars of step `t` (>= 1) at rate `lr` and decay `weight_decay`.
[[nodiscard]] AdamStep adam_step_scalars(const AdamOptions& options, std::uint64_t t, float lr,
                                         float weight_decay) noexcept;

/// The update on raw arrays of n floats, each operation rounded on its own in this order (as
/// torch.optim.Adam / AdamW compute it per element):
///   AdamW:  w = w - lr wd w;  g' = g          Adam:  g' = g + wd w
///   m = beta1 m + (1 - beta1) g';  v = beta2 v + (1 - beta2) g' g'
///   w = w - (lr / c1) m / (sqrt(v) / sqrt(c2) + eps)
/// The CPU backend's Backend::adam_step runs this loop; the CUDA kernel rounds the same
/// operations. No checks; no allocation; g may not alias w, m or v. Thread safety: as the arrays.
/// `check_finite`: as sgd_update's (tasks/optim/sgd.h), the updated w[i] tested in the same loop;
/// returns false when asked to check and one is NaN or Inf, else true.
bool adam_update(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamOptions& options, const AdamStep& step,
                 bool check_finite = false) noexcept;

}  // namespace gradmesh::tasks

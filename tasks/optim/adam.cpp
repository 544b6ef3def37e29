#include "tasks/optim/adam.h"

#include <cmath>
#include <cstdint>

#include "tasks/optim/non_finite.h"

namespace gradmesh::tasks {

AdamStep adam_step_scalars(const AdamOptions& options, std::uint64_t t, float lr,
                           float weight_decay) noexcept {
  const double steps = static_cast<double>(t == 0 ? 1 : t);
  AdamStep s;
  s.lr = lr;
  s.weight_decay = weight_decay;
  s.correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(options.beta1), steps));
  s.correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(options.beta2), steps));
  return s;
}

namespace {

template <bool kCheck>
bool adam_loop(float* w, const float* g, float* m, float* v, std::size_t n,
               const AdamOptions& options, const AdamStep& step) noexcept {
  const float b1 = options.beta1, b2 = options.beta2, eps = options.eps;
  const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
  const float step_size = step.lr / step.correction1;
  const float root_c2 = std::sqrt(step.correction2);
  const float wd = step.weight_decay;
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float wi = w[i];
    float gi = g[i];
    if (options.decoupled) {
      wi = wi - step.lr * wd * wi;
    } else {
      gi = gi + wd * wi;
    }
    const float mi = b1 * m[i] + one_b1 * gi;
    const float vi = b2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float updated = wi - step_size * mi / (std::sqrt(vi) / root_c2 + eps);
    w[i] = updated;
    if constexpr (kCheck) bad |= non_finite_bit(updated);
  }
  return bad == 0;
}

}  // namespace

bool adam_update(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamOptions& options, const AdamStep& step, bool check_finite) noexcept {
  return check_finite ? adam_loop<true>(w, g, m, v, n, options, step)
                      : adam_loop<false>(w, g, m, v, n, options, step);
}

}  // namespace gradmesh::tasks

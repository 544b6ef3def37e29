#include "tasks/optim/sgd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "tasks/optim/non_finite.h"

namespace gradmesh::tasks {

namespace {

template <bool kCheck>
bool sgd_loop(float* w, const float* g, float* velocity, std::size_t n,
              const SgdOptions& options) noexcept {
  const float lr = options.lr;
  const float mu = options.momentum;
  const float wd = options.weight_decay;
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    const float vi = mu * velocity[i] + gi;
    velocity[i] = vi;
    const float wi = w[i] - lr * vi;
    w[i] = wi;
    if constexpr (kCheck) bad |= non_finite_bit(wi);
  }
  return bad == 0;
}

}  // namespace

bool sgd_update(float* w, const float* g, float* velocity, std::size_t n, const SgdOptions& options,
                bool check_finite) noexcept {
  return check_finite ? sgd_loop<true>(w, g, velocity, n, options)
                      : sgd_loop<false>(w, g, velocity, n, options);
}

Sgd::Sgd(SgdOptions o, bool check_finite) : Sgd(o) { check_finite_ = check_finite; }

Sgd::Sgd(SgdOptions o) : options_(o) {
  if (!std::isfinite(o.lr) || o.lr < 0.0f) {
    throw ConfigError("sgd.lr: expected a finite value >= 0, got " + std::to_string(o.lr));
  }
  if (!std::isfinite(o.momentum) || o.momentum < 0.0f || o.momentum >= 1.0f) {
    throw ConfigError("sgd.momentum: expected a value in [0, 1), got " +
                      std::to_string(o.momentum));
  }
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0.0f) {
    throw ConfigError("sgd.weight_decay: expected a finite value >= 0, got " +
                      std::to_string(o.weight_decay));
  }
}

bool Sgd::step(std::span<float> w, std::span<const float> g, std::span<float> velocity) const {
  return step(w, g, velocity, options_.lr);
}

bool Sgd::step(std::span<float> w, std::span<const float> g, std::span<float> velocity,
               float lr) const {
  GRADMESH_CHECK_EQ(g.size(), w.size(), "Sgd::step: gradient size");
  GRADMESH_CHECK_EQ(velocity.size(), w.size(), "Sgd::step: velocity size");
  SgdOptions o = options_;
  o.lr = lr;
  return sgd_update(w.data(), g.data(), velocity.data(), w.size(), o, check_finite_);
}

bool Sgd::step_sum(std::span<float> w, std::span<const std::span<const float>> grads, float scale,
                   std::span<float> velocity, std::span<float> scratch) const {
  return step_sum(w, grads, scale, velocity, scratch, options_.lr);
}

bool Sgd::step_sum(std::span<float> w, std::span<const std::span<const float>> grads, float scale,
                   std::span<float> velocity, std::span<float> scratch, float lr) const {
  GRADMESH_CHECK(!grads.empty(), "Sgd::step_sum: no gradients");
  GRADMESH_CHECK_EQ(scratch.size(), w.size(), "Sgd::step_sum: scratch size");
  for (const auto& g : grads) GRADMESH_CHECK_EQ(g.size(), w.size(), "Sgd::step_sum: gradient size");
  sum_gradients(grads, scale, scratch);
  return step(w, scratch, velocity, lr);
}

void sum_gradients(std::span<const std::span<const float>> grads, float scale,
                   std::span<float> scratch) noexcept {
  std::copy(grads[0].begin(), grads[0].end(), scratch.begin());
  for (std::size_t k = 1; k < grads.size(); ++k) {
    const float* g = grads[k].data();
    for (std::size_t i = 0; i < scratch.size(); ++i) scratch[i] += g[i];
  }
  for (float& s : scratch) s *= scale;
}

}  // namespace gradmesh::tasks

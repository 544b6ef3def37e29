#include "sync/local/outer_optimizer.h"

#include "engine/error.h"

namespace gradmesh::sync {

OuterOptimizer::OuterOptimizer(OuterKind kind, double lr, double momentum, std::size_t floats)
    : kind_(kind),
      lr_(static_cast<float>(lr)),
      momentum_(static_cast<float>(momentum)),
      velocity_(kind == OuterKind::kAverage ? 0 : floats, 0.0f) {}

void OuterOptimizer::step(std::span<float> theta, std::span<const float> delta) {
  apply(theta, delta, theta, velocity_.data());
}

void OuterOptimizer::preview(std::span<const float> theta, std::span<const float> delta,
                             std::span<float> out) const {
  apply(theta, delta, out, nullptr);
}

void OuterOptimizer::apply(std::span<const float> theta, std::span<const float> delta,
                           std::span<float> out, float* v_out) const {
  GRADMESH_CHECK_EQ(theta.size(), delta.size(), "OuterOptimizer::step: sizes");
  GRADMESH_CHECK_EQ(theta.size(), out.size(), "OuterOptimizer::step: sizes");
  if (kind_ == OuterKind::kAverage) {
    for (std::size_t i = 0; i < theta.size(); ++i) out[i] = theta[i] - delta[i];
    return;
  }
  GRADMESH_CHECK_EQ(theta.size(), velocity_.size(), "OuterOptimizer::step: parameter count");
  const float lr = lr_, mu = momentum_;
  const float* v = velocity_.data();
  const bool nesterov = kind_ == OuterKind::kNesterov;
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const float velocity = mu * v[i] + delta[i];
    if (v_out != nullptr) v_out[i] = velocity;
    out[i] = theta[i] - lr * (nesterov ? delta[i] + mu * velocity : velocity);
  }
}

void OuterOptimizer::save_state(engine::StateWriter& out) { out.write_floats(velocity_); }

void OuterOptimizer::load_state(engine::StateReader& in) { in.read_floats(velocity_); }

}  // namespace gradmesh::sync

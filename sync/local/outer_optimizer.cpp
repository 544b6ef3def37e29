#include "sync/local/outer_optimizer.h"

#include "engine/error.h"

namespace gradmesh::sync {

OuterOptimizer::OuterOptimizer(OuterKind kind, double lr, double momentum, std::size_t floats)
    : kind_(kind),
      lr_(static_cast<float>(lr)),
      momentum_(static_cast<float>(momentum)),
      velocity_(kind == OuterKind::kAverage ? 0 : floats, 0.0f) {}

void OuterOptimizer::step(std::span<float> theta, std::span<const float> delta) {
  GRADMESH_CHECK_EQ(theta.size(), delta.size(), "OuterOptimizer::step: sizes");
  if (kind_ == OuterKind::kAverage) {
    for (std::size_t i = 0; i < theta.size(); ++i) theta[i] -= delta[i];
    return;
  }
  GRADMESH_CHECK_EQ(theta.size(), velocity_.size(), "OuterOptimizer::step: parameter count");
  const float lr = lr_, mu = momentum_;
  float* v = velocity_.data();
  if (kind_ == OuterKind::kNesterov) {
    for (std::size_t i = 0; i < theta.size(); ++i) {
      v[i] = mu * v[i] + delta[i];
      theta[i] -= lr * (delta[i] + mu * v[i]);
    }
  } else {
    for (std::size_t i = 0; i < theta.size(); ++i) {
      v[i] = mu * v[i] + delta[i];
      theta[i] -= lr * v[i];
    }
  }
}

void OuterOptimizer::save_state(engine::StateWriter& out) { out.write_floats(velocity_); }

void OuterOptimizer::load_state(engine::StateReader& in) { in.read_floats(velocity_); }

}  // namespace gradmesh::sync

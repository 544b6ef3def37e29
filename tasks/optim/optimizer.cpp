#include "tasks/optim/optimizer.h"

#include "engine/error.h"

namespace gradmesh::tasks {

Optimizer::Optimizer(SgdOptions options, std::size_t parameter_count)
    : sgd_(options), velocity_(parameter_count, 0.0f) {}

std::span<float> Optimizer::velocity_at(std::size_t offset, std::size_t size) {
  GRADMESH_CHECK_LE(offset + size, velocity_.size(), "Optimizer: range outside the model");
  return std::span<float>(velocity_).subspan(offset, size);
}

void Optimizer::step(std::size_t offset, std::span<float> w, std::span<const float> g) {
  sgd_.step(w, g, velocity_at(offset, w.size()));
}

void Optimizer::step_sum(std::size_t offset, std::span<float> w,
                         std::span<const std::span<const float>> grads, float scale,
                         std::span<float> scratch) {
  sgd_.step_sum(w, grads, scale, velocity_at(offset, w.size()), scratch);
}

void Optimizer::step_plain(std::span<float> w, std::span<float> g) const {
  GRADMESH_CHECK_EQ(g.size(), w.size(), "Optimizer::step_plain: gradient size");
  const float lr = options().lr;
  const float wd = options().weight_decay;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (wd != 0.0f) g[i] += wd * w[i];
    w[i] -= lr * g[i];
  }
}

}  // namespace gradmesh::tasks

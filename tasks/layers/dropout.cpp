#include "tasks/layers/dropout.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::tasks {

Dropout::Dropout(Shape shape, double p)
    : Layer(shape, shape), p_(p), scale_(static_cast<float>(1.0 / (1.0 - p))) {
  if (shape.size() == 0) {
    throw ConfigError("dropout: expected a non-empty input, got " + to_string(shape));
  }
  if (!std::isfinite(p) || p < 0.0 || p >= 1.0) {
    throw ConfigError("dropout: expected a probability p with 0 <= p < 1, got " +
                      std::to_string(p));
  }
}

void Dropout::reserve(std::size_t max_batch) { mask_.assign(max_batch * input_size(), 0.0f); }

void Dropout::initialize(std::uint64_t seed) {
  seed_ = seed;
  step_ = 0;
}

std::span<const float> Dropout::mask(std::size_t batch) const {
  GRADMESH_CHECK_LE(batch * input_size(), mask_.size(), "dropout mask: batch vs reserve");
  return std::span<const float>(mask_).first(batch * input_size());
}

void Dropout::forward(const float* x, float* y, std::size_t batch) {
  const std::size_t n = batch * input_size();
  GRADMESH_CHECK_LE(n, mask_.size(), "dropout forward: batch vs reserve");
  masked_ = training_ && p_ > 0.0;
  if (!masked_) {
    std::copy(x, x + n, y);
    return;
  }
  SplitMix64 rng(derive_seed(seed_, step_++));
  const auto p = static_cast<float>(p_);
  for (std::size_t i = 0; i < n; ++i) {
    mask_[i] = rng.next_float() < p ? 0.0f : scale_;
    y[i] = x[i] * mask_[i];
  }
}

void Dropout::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                       std::size_t batch) {
  if (dx == nullptr) return;
  const std::size_t n = batch * input_size();
  if (!masked_) {
    std::copy(dy, dy + n, dx);
    return;
  }
  GRADMESH_CHECK_LE(n, mask_.size(), "dropout backward: batch vs reserve");
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * mask_[i];
}

}  // namespace gradmesh::tasks

#include "tasks/layers/dropout.h"

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

void Dropout::reserve(std::size_t max_batch) {
  mask_ = backend().allocate<float>(max_batch * input_size());
}

void Dropout::initialize(std::uint64_t seed) {
  seed_ = seed;
  step_ = 0;
}

std::span<const float> Dropout::mask(std::size_t batch) const {
  GRADMESH_CHECK_LE(batch * input_size(), mask_.size(), "dropout mask: batch vs reserve");
  GRADMESH_CHECK(backend().host_addressable(),
                 "dropout mask() reads host memory; the layer's "
                 "backend '" +
                     std::string(backend().name()) + "' keeps it on the device");
  return mask_.span().first(batch * input_size());
}

void Dropout::forward(const float* x, float* y, std::size_t batch) {
  const std::size_t n = batch * input_size();
  GRADMESH_CHECK_LE(n, mask_.size(), "dropout forward: batch vs reserve");
  masked_ = training_ && p_ > 0.0;
  if (!masked_) {
    backend().copy(y, x, n * sizeof(float));
    return;
  }
  backend().dropout_forward(x, n, derive_seed(seed_, step_++), static_cast<float>(p_), scale_,
                            mask_.data(), y);
}

void Dropout::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                       std::size_t batch) {
  if (dx == nullptr) return;
  const std::size_t n = batch * input_size();
  if (!masked_) {
    backend().copy(dx, dy, n * sizeof(float));
    return;
  }
  GRADMESH_CHECK_LE(n, mask_.size(), "dropout backward: batch vs reserve");
  backend().multiply(dy, mask_.data(), n, dx);
}

}  // namespace gradmesh::tasks

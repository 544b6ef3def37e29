#include "tasks/layers/relu.h"

#include "engine/error.h"

namespace gradmesh::tasks {

Relu::Relu(std::size_t features) : Relu(Shape::flat(features)) {}

Relu::Relu(Shape shape) : Layer(shape, shape), features_(shape.size()) {
  if (features_ == 0) throw ConfigError("relu layer: expected features >= 1, got 0");
}

void Relu::forward(const float* x, float* y, std::size_t batch) {
  backend().relu_forward(x, batch * features_, y);
}

void Relu::backward(const float* /*x*/, const float* y, const float* dy, float* dx,
                    std::size_t batch) {
  if (dx == nullptr) return;
  backend().relu_backward(y, dy, batch * features_, dx);
}

}  // namespace gradmesh::tasks

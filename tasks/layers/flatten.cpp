#include "tasks/layers/flatten.h"

#include "engine/error.h"

namespace gradmesh::tasks {

Flatten::Flatten(Shape input) : Layer(input, Shape::flat(input.size())) {
  if (input.size() == 0) {
    throw ConfigError("flatten: expected a non-empty input, got " + to_string(input));
  }
}

void Flatten::forward(const float* x, float* y, std::size_t batch) {
  backend().copy(y, x, batch * input_size() * sizeof(float));
}

void Flatten::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                       std::size_t batch) {
  if (dx != nullptr) backend().copy(dx, dy, batch * input_size() * sizeof(float));
}

}  // namespace gradmesh::tasks

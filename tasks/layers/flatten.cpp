#include "tasks/layers/flatten.h"

#include <algorithm>

#include "engine/error.h"

namespace gradmesh::tasks {

Flatten::Flatten(Shape input) : Layer(input, Shape::flat(input.size())) {
  if (input.size() == 0) {
    throw ConfigError("flatten: expected a non-empty input, got " + to_string(input));
  }
}

void Flatten::forward(const float* x, float* y, std::size_t batch) {
  std::copy(x, x + batch * input_size(), y);
}

void Flatten::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                       std::size_t batch) {
  if (dx != nullptr) std::copy(dy, dy + batch * input_size(), dx);
}

}  // namespace gradmesh::tasks

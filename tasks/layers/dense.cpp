#include "tasks/layers/dense.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

Dense::Dense(std::size_t inputs, std::size_t outputs) : Dense(Shape::flat(inputs), outputs) {}

Dense::Dense(Shape input, std::size_t outputs)
    : WeightedLayer(input, Shape::flat(outputs), outputs * input.size(), outputs),
      inputs_(input.size()),
      outputs_(outputs) {
  if (inputs_ == 0 || outputs_ == 0) {
    throw ConfigError("dense layer: expected inputs and outputs >= 1, got " +
                      std::to_string(inputs_) + " -> " + std::to_string(outputs_));
  }
}

void Dense::forward(const float* x, float* y, std::size_t batch) {
  // y (K x M) = b broadcast over rows, then += x (K x N) * W^T (N x M).
  Backend& be = backend();
  be.broadcast_rows(b_.data(), batch, outputs_, y);
  be.sgemm(false, true, batch, outputs_, inputs_, 1.0f, x, inputs_, w_.data(), inputs_, 1.0f, y,
           outputs_);
}

void Dense::backward(const float* x, const float* /*y*/, const float* dy, float* dx,
                     std::size_t batch) {
  Backend& be = backend();
  if (parameter_gradients()) {
    // dW (M x N) = dY^T (M x K) * X (K x N): the sufficient factors U = dY, V = X.
    be.sgemm(true, false, outputs_, inputs_, batch, 1.0f, dy, outputs_, x, inputs_, 0.0f,
             dw_.data(), inputs_);
    // db = column sums of dY.
    be.column_sums(dy, batch, outputs_, db_.data());
  }
  // dx (K x N) = dY (K x M) * W (M x N).
  if (dx != nullptr) {
    be.sgemm(false, false, batch, inputs_, outputs_, 1.0f, dy, outputs_, w_.data(), inputs_, 0.0f,
             dx, inputs_);
  }
}

}  // namespace gradmesh::tasks

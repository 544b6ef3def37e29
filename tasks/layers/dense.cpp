#include "tasks/layers/dense.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "tasks/cpu/blas.h"

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
  for (std::size_t k = 0; k < batch; ++k) {
    std::copy(b_.begin(), b_.end(), y + k * outputs_);
  }
  cpu::sgemm(false, true, batch, outputs_, inputs_, 1.0f, x, inputs_, w_.data(), inputs_, 1.0f, y,
             outputs_);
}

void Dense::backward(const float* x, const float* /*y*/, const float* dy, float* dx,
                     std::size_t batch) {
  if (parameter_gradients()) {
    // dW (M x N) = dY^T (M x K) * X (K x N): the sufficient factors U = dY, V = X.
    cpu::sgemm(true, false, outputs_, inputs_, batch, 1.0f, dy, outputs_, x, inputs_, 0.0f,
               dw_.data(), inputs_);
    // db = column sums of dY.
    std::fill(db_.begin(), db_.end(), 0.0f);
    for (std::size_t k = 0; k < batch; ++k) {
      const float* row = dy + k * outputs_;
      for (std::size_t m = 0; m < outputs_; ++m) db_[m] += row[m];
    }
  }
  // dx (K x N) = dY (K x M) * W (M x N).
  if (dx != nullptr) {
    cpu::sgemm(false, false, batch, inputs_, outputs_, 1.0f, dy, outputs_, w_.data(), inputs_, 0.0f,
               dx, inputs_);
  }
}

}  // namespace gradmesh::tasks

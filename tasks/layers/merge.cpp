#include "tasks/layers/merge.h"

#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {
namespace {

std::string shapes_text(std::span<const Shape> inputs) {
  std::string out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == inputs.size() ? " and " : ", ") + to_string(inputs[i]);
  }
  return out;
}

void check_count(std::string_view kind, std::span<const Shape> inputs) {
  if (inputs.size() < 2) {
    throw ConfigError(std::string(kind) + ": expected two or more inputs ('" + std::string(kind) +
                      " <- <a> <b>'), got " + std::to_string(inputs.size()));
  }
}

Shape checked_add(std::span<const Shape> inputs) {
  check_count("add", inputs);
  for (const Shape& s : inputs) {
    if (s != inputs[0]) {
      throw ConfigError("add: expected inputs of one shape, got " + shapes_text(inputs) +
                        " (a residual block whose branch changes the shape needs a projection "
                        "on its shortcut: conv2d:<channels>:1:<stride>)");
    }
  }
  return inputs[0];
}

Shape concat_output(std::span<const Shape> inputs) {
  check_count("concat", inputs);
  std::size_t channels = 0;
  for (const Shape& s : inputs) {
    if (s.height != inputs[0].height || s.width != inputs[0].width) {
      throw ConfigError("concat: expected inputs of one height and width, got " +
                        shapes_text(inputs));
    }
    channels += s.channels;
  }
  return Shape{channels, inputs[0].height, inputs[0].width};
}

}  // namespace

void MergeLayer::forward(const float*, float*, std::size_t) {
  throw ContractError(std::string(kind()) + ": takes its inputs through forward_inputs");
}

void MergeLayer::backward(const float*, const float*, const float*, float*, std::size_t) {
  throw ContractError(std::string(kind()) + ": takes its inputs through backward_inputs");
}

Add::Add(std::span<const Shape> inputs)
    : MergeLayer(checked_add(inputs), inputs.empty() ? Shape{} : inputs[0]),
      inputs_(inputs.size()) {}

void Add::forward_inputs(std::span<const float* const> xs, float* y, std::size_t batch) {
  GRADMESH_CHECK_EQ(xs.size(), inputs_, "add: inputs");
  const std::size_t n = batch * input_size();
  if (relu_ && xs.size() == 2) {
    backend().add_relu(xs[0], xs[1], n, y);
    return;
  }
  backend().add(xs[0], xs[1], n, y);  // the first two in one pass
  for (std::size_t i = 2; i < xs.size(); ++i) backend().accumulate(y, xs[i], n);
  if (relu_) backend().relu_forward(y, n, y);
}

void Add::backward_inputs(std::span<const float* const> /*xs*/, const float* y, const float* dy,
                          std::span<float* const> dxs, std::size_t batch) {
  GRADMESH_CHECK_EQ(dxs.size(), inputs_, "add: input gradients");
  const std::size_t n = batch * input_size();
  const float* first = nullptr;  // the first input gradient written: the others copy it
  for (float* dx : dxs) {
    if (dx == nullptr) continue;
    if (first != nullptr) {
      backend().copy(dx, first, n * sizeof(float));
    } else if (relu_) {
      backend().relu_backward(y, dy, n, dx);
    } else {
      backend().copy(dx, dy, n * sizeof(float));
    }
    if (first == nullptr) first = dx;
  }
}

Concat::Concat(std::span<const Shape> inputs)
    : MergeLayer(inputs.empty() ? Shape{} : inputs[0], concat_output(inputs)) {
  for (const Shape& s : inputs) sizes_.push_back(s.size());
}

void Concat::forward_inputs(std::span<const float* const> xs, float* y, std::size_t batch) {
  GRADMESH_CHECK_EQ(xs.size(), sizes_.size(), "concat: inputs");
  std::size_t column = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    backend().copy_rows(y + column, output_size(), xs[i], sizes_[i], sizes_[i], batch);
    column += sizes_[i];
  }
}

void Concat::backward_inputs(std::span<const float* const> /*xs*/, const float* /*y*/,
                             const float* dy, std::span<float* const> dxs, std::size_t batch) {
  GRADMESH_CHECK_EQ(dxs.size(), sizes_.size(), "concat: input gradients");
  std::size_t column = 0;
  for (std::size_t i = 0; i < dxs.size(); ++i) {
    if (dxs[i] != nullptr) {
      backend().copy_rows(dxs[i], sizes_[i], dy + column, output_size(), sizes_[i], batch);
    }
    column += sizes_[i];
  }
}

}  // namespace gradmesh::tasks

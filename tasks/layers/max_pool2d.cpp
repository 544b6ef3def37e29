#include "tasks/layers/max_pool2d.h"

#include <limits>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

Shape MaxPool2d::output_shape_for(Shape input, std::size_t window, std::size_t stride,
                                  std::string_view kind) {
  const std::string name(kind);
  if (input.size() == 0) {
    throw ConfigError(name + ": expected a non-empty input, got " + to_string(input));
  }
  if (window == 0 || stride == 0) {
    throw ConfigError(name + ": expected window and stride >= 1, got window " +
                      std::to_string(window) + ", stride " + std::to_string(stride));
  }
  if (window > input.height || window > input.width) {
    throw ConfigError(name + ": expected a window no larger than the input's " +
                      std::to_string(input.height) + "x" + std::to_string(input.width) +
                      " (input " + to_string(input) + "), got " + std::to_string(window) + "x" +
                      std::to_string(window));
  }
  return Shape{input.channels, (input.height - window) / stride + 1,
               (input.width - window) / stride + 1};
}

MaxPool2d::MaxPool2d(Shape input, std::size_t window, std::size_t stride)
    : Layer(input, output_shape_for(input, window, stride)), window_(window), stride_(stride) {
  GRADMESH_CHECK_LE(input.height * input.width,
                    std::size_t{std::numeric_limits<std::uint32_t>::max()},
                    "max_pool2d: input plane");
}

void MaxPool2d::reserve(std::size_t max_batch) {
  argmax_ = backend().allocate<std::uint32_t>(max_batch * output_size());
}

PoolGeometry MaxPool2d::pool_geometry() const noexcept {
  return PoolGeometry{input_shape().height,  input_shape().width, window_, stride_,
                      output_shape().height, output_shape().width};
}

void MaxPool2d::forward(const float* x, float* y, std::size_t batch) {
  GRADMESH_CHECK_LE(batch * output_size(), argmax_.size(), "max_pool2d forward: batch vs reserve");
  backend().max_pool_forward(x, batch * input_shape().channels, pool_geometry(), y, argmax_.data());
}

void MaxPool2d::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                         std::size_t batch) {
  if (dx == nullptr) return;
  GRADMESH_CHECK_LE(batch * output_size(), argmax_.size(), "max_pool2d backward: batch vs reserve");
  backend().max_pool_backward(dy, argmax_.data(), batch * input_shape().channels, pool_geometry(),
                              dx);
}

}  // namespace gradmesh::tasks

#include "tasks/layers/max_pool2d.h"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

Shape MaxPool2d::output_shape_for(Shape input, std::size_t window, std::size_t stride) {
  if (input.size() == 0) {
    throw ConfigError("max_pool2d: expected a non-empty input, got " + to_string(input));
  }
  if (window == 0 || stride == 0) {
    throw ConfigError("max_pool2d: expected window and stride >= 1, got window " +
                      std::to_string(window) + ", stride " + std::to_string(stride));
  }
  if (window > input.height || window > input.width) {
    throw ConfigError("max_pool2d: expected a window no larger than the input's " +
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

void MaxPool2d::reserve(std::size_t max_batch) { argmax_.assign(max_batch * output_size(), 0); }

void MaxPool2d::forward(const float* x, float* y, std::size_t batch) {
  GRADMESH_CHECK_LE(batch * output_size(), argmax_.size(), "max_pool2d forward: batch vs reserve");
  const Shape& in = input_shape();
  const std::size_t oh = output_shape().height, ow = output_shape().width;
  const std::size_t planes = batch * in.channels;
  for (std::size_t plane = 0; plane < planes; ++plane) {
    const float* src = x + plane * in.height * in.width;
    float* dst = y + plane * oh * ow;
    std::uint32_t* arg = argmax_.data() + plane * oh * ow;
    for (std::size_t i = 0; i < oh; ++i) {
      for (std::size_t j = 0; j < ow; ++j) {
        std::size_t best = i * stride_ * in.width + j * stride_;
        for (std::size_t u = 0; u < window_; ++u) {
          const std::size_t row = (i * stride_ + u) * in.width + j * stride_;
          for (std::size_t v = 0; v < window_; ++v) {
            if (src[row + v] > src[best]) best = row + v;
          }
        }
        dst[i * ow + j] = src[best];
        arg[i * ow + j] = static_cast<std::uint32_t>(best);
      }
    }
  }
}

void MaxPool2d::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                         std::size_t batch) {
  if (dx == nullptr) return;
  GRADMESH_CHECK_LE(batch * output_size(), argmax_.size(), "max_pool2d backward: batch vs reserve");
  const std::size_t in_plane = input_shape().height * input_shape().width;
  const std::size_t out_plane = output_shape().height * output_shape().width;
  const std::size_t planes = batch * input_shape().channels;
  std::fill(dx, dx + planes * in_plane, 0.0f);
  for (std::size_t plane = 0; plane < planes; ++plane) {
    float* dst = dx + plane * in_plane;
    const float* src = dy + plane * out_plane;
    const std::uint32_t* arg = argmax_.data() + plane * out_plane;
    for (std::size_t o = 0; o < out_plane; ++o) dst[arg[o]] += src[o];
  }
}

}  // namespace gradmesh::tasks

#include "tasks/layers/avg_pool2d.h"

#include <string>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/blocked_kernels.h"
#include "tasks/layers/max_pool2d.h"

namespace gradmesh::tasks {

AvgPool2d::AvgPool2d(Shape input, std::size_t window, std::size_t stride)
    : Layer(input, MaxPool2d::output_shape_for(input, window, stride, "avg_pool2d")),
      window_(window),
      stride_(stride) {}

PoolGeometry AvgPool2d::pool_geometry() const noexcept {
  return PoolGeometry{input_shape().height,  input_shape().width, window_, stride_,
                      output_shape().height, output_shape().width};
}

void AvgPool2d::forward(const float* x, float* y, std::size_t batch) {
  backend().avg_pool_forward(x, batch * input_shape().channels, pool_geometry(), y);
}

void AvgPool2d::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                         std::size_t batch) {
  if (dx == nullptr) return;
  backend().avg_pool_backward(dy, batch * input_shape().channels, pool_geometry(), dx);
}

namespace {

Shape global_output(Shape input) {
  if (input.size() == 0) {
    throw ConfigError("global_avg_pool: expected a non-empty input, got " + to_string(input));
  }
  return Shape::flat(input.channels);
}

}  // namespace

GlobalAvgPool::GlobalAvgPool(Shape input) : Layer(input, global_output(input)) {}

void GlobalAvgPool::reserve(std::size_t /*max_batch*/) {
  const std::size_t plane = input_shape().height * input_shape().width;
  ones_ = backend().allocate<float>(plane);
  const std::vector<float> ones(plane, 1.0f);
  backend().copy_to_device(ones_.data(), ones.data(), plane * sizeof(float));
  backend().synchronize();  // `ones` goes out of scope
}

void GlobalAvgPool::forward(const float* x, float* y, std::size_t batch) {
  GRADMESH_CHECK(!ones_.empty(), "global_avg_pool forward before reserve");
  const std::size_t planes = batch * input_shape().channels;
  const std::size_t plane = ones_.size();
  if (input_layout() != Layout::kNchw) {
    cpu::global_avg_pool_forward_blocked(channel_block(input_layout()), x, batch,
                                         input_shape().channels, plane, y);
    return;
  }
  backend().sgemm(false, false, planes, 1, plane, 1.0f / static_cast<float>(plane), x, plane,
                  ones_.data(), 1, 0.0f, y, 1);
}

void GlobalAvgPool::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                             std::size_t batch) {
  if (dx == nullptr) return;
  GRADMESH_CHECK(!ones_.empty(), "global_avg_pool backward before reserve");
  const std::size_t planes = batch * input_shape().channels;
  const std::size_t plane = ones_.size();
  if (input_layout() != Layout::kNchw) {
    cpu::global_avg_pool_backward_blocked(channel_block(input_layout()), dy, batch,
                                          input_shape().channels, plane, dx);
    return;
  }
  backend().sgemm(false, false, planes, plane, 1, 1.0f / static_cast<float>(plane), dy, 1,
                  ones_.data(), plane, 0.0f, dx, plane);
}

}  // namespace gradmesh::tasks

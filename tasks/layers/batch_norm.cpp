#include "tasks/layers/batch_norm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/error.h"

namespace gradmesh::tasks {

namespace {

Shape checked(Shape input) {
  if (input.size() == 0) {
    throw ConfigError("batch_norm: expected a non-empty input, got " + to_string(input));
  }
  return input;
}

}  // namespace

BatchNorm::BatchNorm(Shape input)
    : Layer(checked(input), input),
      channels_(input.channels),
      spatial_(input.height * input.width) {}

void BatchNorm::bind(std::span<float> parameters, std::span<float> gradients) {
  GRADMESH_CHECK_EQ(parameters.size(), parameter_count(), "batch_norm bind: parameters");
  GRADMESH_CHECK_EQ(gradients.size(), parameter_count(), "batch_norm bind: gradients");
  gamma_ = parameters.first(channels_);
  beta_ = parameters.subspan(channels_);
  dgamma_ = gradients.first(channels_);
  dbeta_ = gradients.subspan(channels_);
}

void BatchNorm::reserve(std::size_t /*max_batch*/) {
  for (Buffer<float>* b :
       {&mean_, &var_, &inv_std_, &running_mean_, &running_var_, &eval_inv_std_}) {
    *b = backend().allocate<float>(channels_);
  }
}

void BatchNorm::initialize(std::uint64_t /*seed*/) {
  GRADMESH_CHECK(!gamma_.empty(), "batch_norm initialize before bind");
  GRADMESH_CHECK(!running_var_.empty(), "batch_norm initialize before reserve");
  std::fill(gamma_.begin(), gamma_.end(), 1.0f);
  std::fill(beta_.begin(), beta_.end(), 0.0f);
  const std::vector<float> zeros(channels_, 0.0f), ones(channels_, 1.0f);
  backend().copy_to_device(running_mean_.data(), zeros.data(), channels_ * sizeof(float));
  backend().copy_to_device(running_var_.data(), ones.data(), channels_ * sizeof(float));
  backend().synchronize();  // the host vectors go out of scope
}

void BatchNorm::forward(const float* x, float* y, std::size_t batch) {
  GRADMESH_CHECK(!mean_.empty(), "batch_norm forward before reserve");
  Backend& b = backend();
  if (training_) {
    const auto m = static_cast<float>(batch * spatial_);
    b.batch_norm_statistics(x, batch, channels_, spatial_, mean_.data(), var_.data());
    b.batch_norm_update(mean_.data(), var_.data(), channels_, kMomentum,
                        m > 1.0f ? m / (m - 1.0f) : 1.0f, kEpsilon, running_mean_.data(),
                        running_var_.data(), inv_std_.data());
    b.batch_norm_forward(x, batch, channels_, spatial_, mean_.data(), inv_std_.data(),
                         gamma_.data(), beta_.data(), y);
  } else {
    b.batch_norm_update(running_mean_.data(), running_var_.data(), channels_, 0.0f, 1.0f, kEpsilon,
                        nullptr, nullptr, eval_inv_std_.data());
    b.batch_norm_forward(x, batch, channels_, spatial_, running_mean_.data(), eval_inv_std_.data(),
                         gamma_.data(), beta_.data(), y);
  }
}

void BatchNorm::backward(const float* x, const float* /*y*/, const float* dy, float* dx,
                         std::size_t batch) {
  backend().batch_norm_backward(x, dy, batch, channels_, spatial_, mean_.data(), inv_std_.data(),
                                gamma_.data(), dx, dgamma_.data(), dbeta_.data());
}

void BatchNorm::save_layer_state(std::span<float> out) {
  GRADMESH_CHECK_EQ(out.size(), state_size(), "batch_norm save_layer_state: floats");
  backend().copy_to_host(out.data(), running_mean_.data(), channels_ * sizeof(float));
  backend().copy_to_host(out.data() + channels_, running_var_.data(), channels_ * sizeof(float));
}

void BatchNorm::load_layer_state(std::span<const float> in) {
  GRADMESH_CHECK_EQ(in.size(), state_size(), "batch_norm load_layer_state: floats");
  backend().copy_to_device(running_mean_.data(), in.data(), channels_ * sizeof(float));
  backend().copy_to_device(running_var_.data(), in.data() + channels_, channels_ * sizeof(float));
  backend().synchronize();  // `in` may go away after the call
}

}  // namespace gradmesh::tasks

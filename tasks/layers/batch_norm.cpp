#include "tasks/layers/batch_norm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/blocked_kernels.h"

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

void BatchNorm::reserve(std::size_t max_batch) {
  max_batch_ = max_batch;
  for (Buffer<float>* b :
       {&mean_, &var_, &inv_std_, &running_mean_, &running_var_, &eval_inv_std_}) {
    *b = backend().allocate<float>(channels_);
  }
  kernels_ = backend().make_batch_norm(channels_, spatial_, max_batch, kEpsilon);
}

void BatchNorm::set_layouts(Layout input, Layout output) {
  Layer::set_layouts(input, output);
  if (kernels_) kernels_->set_layout(input);
}

bool BatchNorm::fuse_relu() {
  GRADMESH_CHECK(max_batch_ > 0, "batch_norm fuse_relu before reserve");
  if (!kernels_) return false;
  kernels_->set_relu(true);
  relu_ = true;
  if (exchange_ != nullptr) masked_dy_ = backend().allocate<float>(max_batch_ * input_size());
  return true;
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
  GRADMESH_CHECK_LE(batch, max_batch_, "batch_norm forward: batch against reserve's max_batch");
  Backend& b = backend();
  const auto m = static_cast<float>(batch * spatial_);
  const float unbias = m > 1.0f ? m / (m - 1.0f) : 1.0f;
  if (kernels_ && (!training_ || exchange_ == nullptr)) {
    if (training_) {
      kernels_->forward_training(x, gamma_.data(), beta_.data(), y, mean_.data(), var_.data(),
                                 batch);
      b.batch_norm_update(mean_.data(), var_.data(), channels_, kMomentum, unbias, kEpsilon,
                          running_mean_.data(), running_var_.data(), inv_std_.data());
    } else {
      kernels_->forward_inference(x, running_mean_.data(), running_var_.data(), gamma_.data(),
                                  beta_.data(), y, batch);
    }
    return;
  }
  if (training_) {
    auto m_global = m;
    if (input_layout() != Layout::kNchw) {
      cpu::batch_norm_statistics_blocked(channel_block(input_layout()), x, batch, channels_,
                                         spatial_, mean_.data(), var_.data());
    } else {
      b.batch_norm_statistics(x, batch, channels_, spatial_, mean_.data(), var_.data());
    }
    if (exchange_ != nullptr) m_global = combine_statistics(m);
    b.batch_norm_update(mean_.data(), var_.data(), channels_, kMomentum,
                        m_global > 1.0f ? m_global / (m_global - 1.0f) : 1.0f, kEpsilon,
                        running_mean_.data(), running_var_.data(), inv_std_.data());
    normalize(x, batch, mean_.data(), inv_std_.data(), gamma_.data(), beta_.data(), y);
  } else {
    b.batch_norm_update(running_mean_.data(), running_var_.data(), channels_, 0.0f, 1.0f, kEpsilon,
                        nullptr, nullptr, eval_inv_std_.data());
    normalize(x, batch, running_mean_.data(), eval_inv_std_.data(), gamma_.data(), beta_.data(), y);
  }
  if (relu_) b.relu_forward(y, batch * input_size(), y);
}

void BatchNorm::backward(const float* x, const float* y, const float* dy, float* dx,
                         std::size_t batch) {
  // SyncBN's dx goes through scratch_, sized by reserve's max_batch.
  GRADMESH_CHECK_LE(batch, max_batch_, "batch_norm backward: batch against reserve's max_batch");
  if (kernels_ && exchange_ == nullptr) {
    kernels_->backward(x, dy, mean_.data(), var_.data(), gamma_.data(), beta_.data(), dx,
                       dgamma_.data(), dbeta_.data(), batch);
    return;
  }
  if (relu_) {  // the fused ReLU's backward first
    backend().relu_backward(y, dy, batch * input_size(), masked_dy_.data());
    dy = masked_dy_.data();
  }
  // SyncBN: this node's dgamma, dbeta first (its share, with the global statistics), then dx
  // from every node's.
  float* local_dx = exchange_ != nullptr ? nullptr : dx;
  if (input_layout() != Layout::kNchw) {
    cpu::batch_norm_backward_blocked(channel_block(input_layout()), x, dy, batch, channels_,
                                     spatial_, mean_.data(), inv_std_.data(), gamma_.data(),
                                     local_dx, dgamma_.data(), dbeta_.data());
  } else {
    backend().batch_norm_backward(x, dy, batch, channels_, spatial_, mean_.data(), inv_std_.data(),
                                  gamma_.data(), local_dx, dgamma_.data(), dbeta_.data());
  }
  if (exchange_ != nullptr && dx != nullptr) global_input_gradient(x, dy, dx, batch);
}

void BatchNorm::normalize(const float* x, std::size_t batch, const float* mean,
                          const float* inv_std, const float* gamma, const float* beta, float* y) {
  if (input_layout() != Layout::kNchw) {
    cpu::batch_norm_forward_blocked(channel_block(input_layout()), x, batch, channels_, spatial_,
                                    mean, inv_std, gamma, beta, y);
  } else {
    backend().batch_norm_forward(x, batch, channels_, spatial_, mean, inv_std, gamma, beta, y);
  }
}

void BatchNorm::set_statistics_exchange(BatchStatisticsExchange* exchange) {
  GRADMESH_CHECK(!mean_.empty(), "batch_norm set_statistics_exchange before reserve");
  exchange_ = exchange;
  if (exchange == nullptr) return;
  const std::size_t row = 2 * channels_ + 1;
  mine_.assign(row, 0.0f);
  all_.assign(row * exchange->nodes(), 0.0f);
  host_a_.assign(channels_, 0.0f);
  host_b_.assign(channels_, 0.0f);
  Backend& b = backend();
  for (Buffer<float>* buffer : {&zeros_, &ones_, &coef_a_, &coef_g_, &coef_b_}) {
    *buffer = b.allocate<float>(channels_);
  }
  scratch_ = b.allocate<float>(max_batch_ * input_size());
  if (relu_ && masked_dy_.empty()) masked_dy_ = b.allocate<float>(max_batch_ * input_size());
  b.fill(zeros_.data(), channels_, 0.0f);
  b.fill(ones_.data(), channels_, 1.0f);
}

float BatchNorm::combine_statistics(float local_count) {
  Backend& b = backend();
  const std::size_t c = channels_, row = 2 * c + 1, nodes = exchange_->nodes();
  mine_[0] = local_count;
  b.copy_to_host(mine_.data() + 1, mean_.data(), c * sizeof(float));
  b.copy_to_host(mine_.data() + 1 + c, var_.data(), c * sizeof(float));
  exchange_->all_gather(mine_, all_);
  double total = 0;
  for (std::size_t r = 0; r < nodes; ++r) total += static_cast<double>(all_[r * row]);
  for (std::size_t k = 0; k < c; ++k) {
    double mean = 0, spread = 0;
    for (std::size_t r = 0; r < nodes; ++r) {
      mean += static_cast<double>(all_[r * row]) * static_cast<double>(all_[r * row + 1 + k]);
    }
    mean /= total;
    for (std::size_t r = 0; r < nodes; ++r) {
      const double d = static_cast<double>(all_[r * row + 1 + k]) - mean;
      spread += static_cast<double>(all_[r * row]) *
                (static_cast<double>(all_[r * row + 1 + c + k]) + d * d);
    }
    host_a_[k] = static_cast<float>(mean);
    host_b_[k] = static_cast<float>(spread / total);
  }
  b.copy_to_device(mean_.data(), host_a_.data(), c * sizeof(float));
  b.copy_to_device(var_.data(), host_b_.data(), c * sizeof(float));
  global_count_ = static_cast<float>(total);
  return global_count_;
}

void BatchNorm::global_input_gradient(const float* x, const float* dy, float* dx,
                                      std::size_t batch) {
  Backend& b = backend();
  const std::size_t c = channels_, nodes = exchange_->nodes();
  b.copy_to_host(mine_.data(), dgamma_.data(), c * sizeof(float));
  b.copy_to_host(mine_.data() + c, dbeta_.data(), c * sizeof(float));
  mine_[2 * c] = 0.0f;
  exchange_->all_gather(mine_, all_);
  // dx = a (dy - sum dbeta / M - x_hat sum dgamma / M), a = gamma inv_std: as a dy plus
  // g x_hat + h with g = -a sum dgamma / M, h = -a sum dbeta / M (two batch_norm_forward calls,
  // so every backend computes it with the kernels it has).
  b.copy_to_host(host_a_.data(), gamma_.data(), c * sizeof(float));
  b.copy_to_host(host_b_.data(), inv_std_.data(), c * sizeof(float));
  const std::size_t row = 2 * c + 1;
  std::vector<float>& g = mine_;  // reused: C floats of g, then C of h
  for (std::size_t k = 0; k < c; ++k) {
    double sum_dgamma = 0, sum_dbeta = 0;
    for (std::size_t r = 0; r < nodes; ++r) {
      sum_dgamma += static_cast<double>(all_[r * row + k]);
      sum_dbeta += static_cast<double>(all_[r * row + c + k]);
    }
    const double a = static_cast<double>(host_a_[k]) * static_cast<double>(host_b_[k]);
    host_a_[k] = static_cast<float>(a);
    g[k] = static_cast<float>(-a * sum_dgamma / static_cast<double>(global_count_));
    g[c + k] = static_cast<float>(-a * sum_dbeta / static_cast<double>(global_count_));
  }
  b.copy_to_device(coef_a_.data(), host_a_.data(), c * sizeof(float));
  b.copy_to_device(coef_g_.data(), g.data(), c * sizeof(float));
  b.copy_to_device(coef_b_.data(), g.data() + c, c * sizeof(float));
  normalize(dy, batch, zeros_.data(), ones_.data(), coef_a_.data(), zeros_.data(), dx);
  normalize(x, batch, mean_.data(), inv_std_.data(), coef_g_.data(), coef_b_.data(),
            scratch_.data());
  b.accumulate(dx, scratch_.data(), batch * input_size());
  b.synchronize();  // the host coefficients are rewritten by the next pass
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

#include "tasks/layers/conv2d.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

Shape Conv2d::output_shape_for(Shape input, Conv2dGeometry g) {
  if (input.size() == 0) {
    throw ConfigError("conv2d: expected a non-empty input, got " + to_string(input));
  }
  if (g.filters == 0 || g.kernel == 0 || g.stride == 0) {
    throw ConfigError("conv2d: expected filters, kernel and stride >= 1, got filters " +
                      std::to_string(g.filters) + ", kernel " + std::to_string(g.kernel) +
                      ", stride " + std::to_string(g.stride));
  }
  const std::size_t padded_h = input.height + 2 * g.padding;
  const std::size_t padded_w = input.width + 2 * g.padding;
  if (g.kernel > padded_h || g.kernel > padded_w) {
    throw ConfigError("conv2d: expected a kernel no larger than the padded input " +
                      std::to_string(padded_h) + "x" + std::to_string(padded_w) + " (input " +
                      to_string(input) + ", padding " + std::to_string(g.padding) + "), got " +
                      std::to_string(g.kernel) + "x" + std::to_string(g.kernel));
  }
  return Shape{g.filters, (padded_h - g.kernel) / g.stride + 1,
               (padded_w - g.kernel) / g.stride + 1};
}

Conv2d::Conv2d(Shape input, Conv2dGeometry geometry, std::size_t column_budget)
    : WeightedLayer(input, output_shape_for(input, geometry),
                    geometry.filters * input.channels * geometry.kernel * geometry.kernel,
                    geometry.filters),
      geometry_(geometry),
      patch_(input.channels * geometry.kernel * geometry.kernel),
      positions_(output_shape().height * output_shape().width),
      column_budget_(column_budget) {}

void Conv2d::reserve(std::size_t max_batch) {
  GRADMESH_CHECK_GT(max_batch, std::size_t{0}, "conv2d reserve: max_batch");
  max_batch_ = max_batch;
  kernels_ = backend().make_convolution(im2col_geometry(), geometry_.filters, max_batch);
  if (kernels_ != nullptr) {
    // The backend's own kernels take the whole batch: no columns, chunks or partial sums.
    chunk_ = max_batch;
    slots_ = 1;
    col_ = {};
    out_ = {};
    dw_partials_ = {};
    db_partials_ = {};
    return;
  }
  chunk_ = std::clamp<std::size_t>(column_budget_ / (patch_ * positions_), 1, max_batch);
  const std::size_t chunks = chunk_count(max_batch);
  slots_ = std::clamp<std::size_t>(backend().chunk_slots(), 1, chunks);
  col_ = backend().allocate<float>(slots_ * col_floats());
  out_ = backend().allocate<float>(slots_ * out_floats());
  const std::size_t partials = gradient_groups(max_batch) - 1;
  dw_partials_ = backend().allocate<float>(partials * geometry_.filters * patch_);
  db_partials_ = backend().allocate<float>(partials * geometry_.filters);
}

void Conv2d::set_layouts(Layout input, Layout output) {
  Layer::set_layouts(input, output);
  if (kernels_ != nullptr) kernels_->set_layouts(input, output);
}

std::size_t Conv2d::gradient_groups(std::size_t batch) const noexcept {
  if (chunk_ == 0) return 0;
  const std::size_t chunks = chunk_count(batch);
  // 1 + how many more sums of dW fit in the column budget.
  const std::size_t fit = 1 + column_budget_ / (geometry_.filters * patch_);
  return std::max<std::size_t>(1, std::min({chunks, kGradientGroups, fit}));
}

double Conv2d::forward_flops() const noexcept {
  return (2.0 * static_cast<double>(patch_) + 1.0) * static_cast<double>(output_size());
}

void Conv2d::initialize(std::uint64_t seed) {
  const std::size_t area = geometry_.kernel * geometry_.kernel;
  glorot_uniform(seed, input_shape().channels * area, geometry_.filters * area);
}

Im2colGeometry Conv2d::im2col_geometry() const noexcept {
  const Shape& in = input_shape();
  return Im2colGeometry{in.channels,           in.height,           in.width,
                        geometry_.kernel,      geometry_.stride,    geometry_.padding,
                        output_shape().height, output_shape().width};
}

void Conv2d::forward(const float* x, float* y, std::size_t batch) {
  GRADMESH_CHECK(chunk_ > 0, "conv2d forward before reserve");
  GRADMESH_CHECK_LE(batch, max_batch_, "conv2d forward: batch against reserve's max_batch");
  if (kernels_ != nullptr) {
    kernels_->forward(x, w_.data(), b_.data(), y, batch);
    return;
  }
  Backend& be = backend();
  const Im2colGeometry g = im2col_geometry();
  const std::size_t filters = geometry_.filters;
  auto chunk = [&](std::size_t c, std::size_t slot) {
    const std::size_t first = c * chunk_;
    const std::size_t samples = std::min(chunk_, batch - first);
    const std::size_t ld = samples * positions_;
    float* col = col_.data() + slot * col_floats();
    float* out = out_.data() + slot * out_floats();
    be.im2col(x + first * input_size(), samples, g, col, ld);
    // out (F x samples OH OW) = W (F x C k k) * col (C k k x samples OH OW).
    be.sgemm(false, false, filters, ld, patch_, 1.0f, w_.data(), patch_, col, ld, 0.0f, out, ld);
    // y_n (F x OH OW) = out's columns of sample n + b.
    be.unpack_channels_add_bias(out, ld, samples, filters, positions_, b_.data(),
                                y + first * output_size());
  };
  be.run_chunks(chunk_count(batch), slots_, chunk);
}

void Conv2d::backward(const float* x, const float* /*y*/, const float* dy, float* dx,
                      std::size_t batch) {
  GRADMESH_CHECK(chunk_ > 0, "conv2d backward before reserve");
  GRADMESH_CHECK_LE(batch, max_batch_, "conv2d backward: batch against reserve's max_batch");
  Backend& be = backend();
  const Im2colGeometry g = im2col_geometry();
  const std::size_t filters = geometry_.filters;
  const bool parameters = parameter_gradients();
  if (!parameters && dx == nullptr) return;
  if (kernels_ != nullptr) {
    kernels_->backward(x, w_.data(), dy, dx, parameters ? dw_.data() : nullptr,
                       parameters ? db_.data() : nullptr, batch);
    return;
  }
  const std::size_t chunks = chunk_count(batch);
  const std::size_t groups = gradient_groups(batch);
  // Group q sums its chunks' dW and db into its own buffers (q = 0: the layer's), in chunk order.
  auto group = [&](std::size_t q, std::size_t slot) {
    float* col = col_.data() + slot * col_floats();
    float* out = out_.data() + slot * out_floats();
    float* dw = q == 0 ? dw_.data() : dw_partials_.data() + (q - 1) * dw_.size();
    float* db = q == 0 ? db_.data() : db_partials_.data() + (q - 1) * filters;
    if (parameters) be.fill(db, filters, 0.0f);
    const std::size_t begin = q * chunks / groups;
    const std::size_t end = (q + 1) * chunks / groups;
    for (std::size_t c = begin; c < end; ++c) {
      const std::size_t first = c * chunk_;
      const std::size_t samples = std::min(chunk_, batch - first);
      const std::size_t ld = samples * positions_;
      // out (F x samples OH OW) = the chunk's dY, sample n in its own columns; db += row sums.
      be.pack_channels(dy + first * output_size(), samples, filters, positions_, out, ld,
                       parameters ? db : nullptr);
      if (parameters) {
        be.im2col(x + first * input_size(), samples, g, col, ld);
        // dW (F x C k k) (+)= dY (F x samples OH OW) * col^T (samples OH OW x C k k).
        be.sgemm(false, true, filters, patch_, ld, 1.0f, out, ld, col, ld, c == begin ? 0.0f : 1.0f,
                 dw, patch_);
      }
      if (dx != nullptr) {
        // dcol (C k k x samples OH OW) = W^T (C k k x F) * dY, into col (its columns are used).
        be.sgemm(true, false, patch_, ld, filters, 1.0f, w_.data(), patch_, out, ld, 0.0f, col, ld);
        be.col2im(col, ld, samples, g, dx + first * input_size());
      }
    }
  };
  be.run_chunks(groups, slots_, group);
  if (!parameters) return;
  // The groups' sums added in group order: the same bits whichever threads ran them.
  for (std::size_t q = 1; q < groups; ++q) {
    be.accumulate(dw_.data(), dw_partials_.data() + (q - 1) * dw_.size(), dw_.size());
    be.accumulate(db_.data(), db_partials_.data() + (q - 1) * filters, filters);
  }
}

}  // namespace gradmesh::tasks

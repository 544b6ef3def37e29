#include "tasks/layers/conv2d.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "tasks/cpu/blas.h"

namespace gradmesh::tasks {
namespace {

/// The output indices o in [0, out) whose input index o s + offset - p lies in [0, in): the
/// half-open range [lo, hi). offset is the kernel tap (u or v).
struct ValidRange {
  std::size_t lo, hi;
};

ValidRange valid_outputs(std::size_t out, std::size_t in, std::size_t stride, std::size_t offset,
                         std::size_t padding) noexcept {
  // o s + offset >= p  <=>  o >= ceil((p - offset) / s) when p > offset.
  const std::size_t lo = padding > offset ? (padding - offset + stride - 1) / stride : 0;
  // o s + offset - p <= in - 1  <=>  o <= (in - 1 + p - offset) / s; none when the tap lies in
  // the right-hand padding for every o (offset > in - 1 + p).
  if (offset > in - 1 + padding) return {0, 0};
  const std::size_t hi = std::min(out, (in - 1 + padding - offset) / stride + 1);
  return {std::min(lo, hi), hi};
}

}  // namespace

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
  chunk_ = std::clamp<std::size_t>(column_budget_ / (patch_ * positions_), 1, max_batch);
  col_.assign(patch_ * positions_ * chunk_, 0.0f);
  out_.assign(geometry_.filters * positions_ * chunk_, 0.0f);
}

double Conv2d::forward_flops() const noexcept {
  return (2.0 * static_cast<double>(patch_) + 1.0) * static_cast<double>(output_size());
}

void Conv2d::initialize(std::uint64_t seed) {
  const std::size_t area = geometry_.kernel * geometry_.kernel;
  glorot_uniform(seed, input_shape().channels * area, geometry_.filters * area);
}

void Conv2d::im2col(const float* x, float* col, std::size_t ld) const noexcept {
  const Shape& in = input_shape();
  const std::size_t k = geometry_.kernel, s = geometry_.stride, p = geometry_.padding;
  const std::size_t oh = output_shape().height, ow = output_shape().width;
  for (std::size_t c = 0; c < in.channels; ++c) {
    const float* plane = x + c * in.height * in.width;
    for (std::size_t u = 0; u < k; ++u) {
      const ValidRange rows = valid_outputs(oh, in.height, s, u, p);
      for (std::size_t v = 0; v < k; ++v) {
        const ValidRange cols = valid_outputs(ow, in.width, s, v, p);
        float* out = col + ((c * k + u) * k + v) * ld;
        std::fill(out, out + rows.lo * ow, 0.0f);
        for (std::size_t i = rows.lo; i < rows.hi; ++i) {
          const float* src = plane + (i * s + u - p) * in.width;
          float* dst = out + i * ow;
          std::fill(dst, dst + cols.lo, 0.0f);
          if (s == 1 && cols.lo < cols.hi) {
            std::copy(src + (cols.lo + v - p), src + (cols.hi + v - p), dst + cols.lo);
          } else {
            for (std::size_t j = cols.lo; j < cols.hi; ++j) dst[j] = src[j * s + v - p];
          }
          std::fill(dst + cols.hi, dst + ow, 0.0f);
        }
        std::fill(out + rows.hi * ow, out + positions_, 0.0f);
      }
    }
  }
}

void Conv2d::col2im(const float* dcol, std::size_t ld, float* dx) const noexcept {
  const Shape& in = input_shape();
  const std::size_t k = geometry_.kernel, s = geometry_.stride, p = geometry_.padding;
  const std::size_t oh = output_shape().height, ow = output_shape().width;
  std::fill(dx, dx + in.size(), 0.0f);
  for (std::size_t c = 0; c < in.channels; ++c) {
    float* plane = dx + c * in.height * in.width;
    for (std::size_t u = 0; u < k; ++u) {
      const ValidRange rows = valid_outputs(oh, in.height, s, u, p);
      for (std::size_t v = 0; v < k; ++v) {
        const ValidRange cols = valid_outputs(ow, in.width, s, v, p);
        const float* src_rows = dcol + ((c * k + u) * k + v) * ld;
        for (std::size_t i = rows.lo; i < rows.hi; ++i) {
          float* dst = plane + (i * s + u - p) * in.width;
          const float* src = src_rows + i * ow;
          for (std::size_t j = cols.lo; j < cols.hi; ++j) dst[j * s + v - p] += src[j];
        }
      }
    }
  }
}

void Conv2d::forward(const float* x, float* y, std::size_t batch) {
  GRADMESH_CHECK(chunk_ > 0, "conv2d forward before reserve");
  const std::size_t filters = geometry_.filters;
  for (std::size_t first = 0; first < batch; first += chunk_) {
    const std::size_t samples = std::min(chunk_, batch - first);
    const std::size_t ld = samples * positions_;
    for (std::size_t s = 0; s < samples; ++s) {
      im2col(x + (first + s) * input_size(), col_.data() + s * positions_, ld);
    }
    // out (F x samples OH OW) = W (F x C k k) * col (C k k x samples OH OW).
    cpu::sgemm(false, false, filters, ld, patch_, 1.0f, w_.data(), patch_, col_.data(), ld, 0.0f,
               out_.data(), ld);
    // y_n (F x OH OW) = out's columns of sample n + b.
    for (std::size_t s = 0; s < samples; ++s) {
      float* yn = y + (first + s) * output_size();
      for (std::size_t f = 0; f < filters; ++f) {
        const float* src = out_.data() + f * ld + s * positions_;
        float* dst = yn + f * positions_;
        for (std::size_t i = 0; i < positions_; ++i) dst[i] = src[i] + b_[f];
      }
    }
  }
}

void Conv2d::backward(const float* x, const float* /*y*/, const float* dy, float* dx,
                      std::size_t batch) {
  GRADMESH_CHECK(chunk_ > 0, "conv2d backward before reserve");
  const std::size_t filters = geometry_.filters;
  const bool parameters = parameter_gradients();
  if (parameters) std::fill(db_.begin(), db_.end(), 0.0f);
  if (!parameters && dx == nullptr) return;
  for (std::size_t first = 0; first < batch; first += chunk_) {
    const std::size_t samples = std::min(chunk_, batch - first);
    const std::size_t ld = samples * positions_;
    // out (F x samples OH OW) = the chunk's dY, sample n in its own columns; db = its row sums.
    for (std::size_t s = 0; s < samples; ++s) {
      const float* dyn = dy + (first + s) * output_size();
      for (std::size_t f = 0; f < filters; ++f) {
        const float* src = dyn + f * positions_;
        std::copy(src, src + positions_, out_.data() + f * ld + s * positions_);
        if (parameters) {
          float sum = 0.0f;
          for (std::size_t i = 0; i < positions_; ++i) sum += src[i];
          db_[f] += sum;
        }
      }
    }
    if (parameters) {
      for (std::size_t s = 0; s < samples; ++s) {
        im2col(x + (first + s) * input_size(), col_.data() + s * positions_, ld);
      }
      // dW (F x C k k) (+)= dY (F x samples OH OW) * col^T (samples OH OW x C k k).
      cpu::sgemm(false, true, filters, patch_, ld, 1.0f, out_.data(), ld, col_.data(), ld,
                 first == 0 ? 0.0f : 1.0f, dw_.data(), patch_);
    }
    if (dx != nullptr) {
      // dcol (C k k x samples OH OW) = W^T (C k k x F) * dY, into col_ (its columns are used).
      cpu::sgemm(true, false, patch_, ld, filters, 1.0f, w_.data(), patch_, out_.data(), ld, 0.0f,
                 col_.data(), ld);
      for (std::size_t s = 0; s < samples; ++s) {
        col2im(col_.data() + s * positions_, ld, dx + (first + s) * input_size());
      }
    }
  }
}

}  // namespace gradmesh::tasks

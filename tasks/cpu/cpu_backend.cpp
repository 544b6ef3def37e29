#include "tasks/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/cpu/parallel.h"
#if GRADMESH_HAVE_ONEDNN
#include "tasks/cpu/onednn_batch_norm.h"
#include "tasks/cpu/onednn_convolution.h"
#endif
#include "tasks/layers/softmax_cross_entropy.h"
#include "tasks/random.h"

namespace gradmesh::tasks::cpu {
namespace {

void release_host(void* p) noexcept { std::free(p); }

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

/// One row of im2col's columns (tap u, v of one channel's plane) for stride 1 with the output
/// as wide as the input (k = 2p + 1, "same" padding): out[i OW + j] = plane[i + u - p, j + v - p]
/// is one contiguous copy at offset (u - p) W + (v - p), clipped to the plane, then the entries
/// that fell outside a row (j + v - p outside [0, W)) and the rows outside [rows.lo, rows.hi)
/// zeroed. One memcpy a tap instead of one a row: same values as the row-by-row form.
void same_width_taps(const float* plane, const Im2colGeometry& g, std::size_t u, std::size_t v,
                     ValidRange rows, ValidRange cols, float* out) noexcept {
  const std::size_t w = g.width, ow = g.out_width, p = g.padding, plane_size = g.height * w;
  const auto offset = static_cast<std::ptrdiff_t>((u * w + v)) -
                      static_cast<std::ptrdiff_t>(p * w + p);  // (u - p) W + (v - p)
  auto first = static_cast<std::ptrdiff_t>(rows.lo * ow);
  auto last = static_cast<std::ptrdiff_t>(rows.hi * ow);
  first = std::max(first, -offset);
  last = std::min(last, static_cast<std::ptrdiff_t>(plane_size) - offset);
  std::fill(out, out + rows.lo * ow, 0.0f);
  if (first < last) {
    std::memcpy(out + first, plane + first + offset,
                static_cast<std::size_t>(last - first) * sizeof(float));
  }
  for (std::size_t i = rows.lo; i < rows.hi; ++i) {
    float* dst = out + i * ow;
    std::fill(dst, dst + cols.lo, 0.0f);
    std::fill(dst + cols.hi, dst + ow, 0.0f);
  }
  std::fill(out + rows.hi * ow, out + g.out_height * ow, 0.0f);
}

/// col (patch x positions, row stride ld) = the receptive fields of one sample x (C x H x W).
void im2col_sample(const float* x, const Im2colGeometry& g, float* col, std::size_t ld) noexcept {
  const std::size_t k = g.kernel, s = g.stride, p = g.padding;
  const std::size_t oh = g.out_height, ow = g.out_width, positions = g.positions();
  for (std::size_t c = 0; c < g.channels; ++c) {
    const float* plane = x + c * g.height * g.width;
    for (std::size_t u = 0; u < k; ++u) {
      const ValidRange rows = valid_outputs(oh, g.height, s, u, p);
      for (std::size_t v = 0; v < k; ++v) {
        const ValidRange cols = valid_outputs(ow, g.width, s, v, p);
        float* out = col + ((c * k + u) * k + v) * ld;
        if (s == 1 && ow == g.width && rows.lo < rows.hi) {
          same_width_taps(plane, g, u, v, rows, cols, out);
          continue;
        }
        std::fill(out, out + rows.lo * ow, 0.0f);
        for (std::size_t i = rows.lo; i < rows.hi; ++i) {
          const float* src = plane + (i * s + u - p) * g.width;
          float* dst = out + i * ow;
          std::fill(dst, dst + cols.lo, 0.0f);
          if (s == 1 && cols.lo < cols.hi) {
            std::copy(src + (cols.lo + v - p), src + (cols.hi + v - p), dst + cols.lo);
          } else {
            for (std::size_t j = cols.lo; j < cols.hi; ++j) dst[j] = src[j * s + v - p];
          }
          std::fill(dst + cols.hi, dst + ow, 0.0f);
        }
        std::fill(out + rows.hi * ow, out + positions, 0.0f);
      }
    }
  }
}

/// dx (C x H x W) = the sum of dcol (patch x positions, row stride ld) back over the receptive
/// fields.
void col2im_sample(const float* dcol, std::size_t ld, const Im2colGeometry& g, float* dx) noexcept {
  const std::size_t k = g.kernel, s = g.stride, p = g.padding;
  const std::size_t oh = g.out_height, ow = g.out_width;
  std::fill(dx, dx + g.sample_size(), 0.0f);
  for (std::size_t c = 0; c < g.channels; ++c) {
    float* plane = dx + c * g.height * g.width;
    for (std::size_t u = 0; u < k; ++u) {
      const ValidRange rows = valid_outputs(oh, g.height, s, u, p);
      for (std::size_t v = 0; v < k; ++v) {
        const ValidRange cols = valid_outputs(ow, g.width, s, v, p);
        const float* src_rows = dcol + ((c * k + u) * k + v) * ld;
        for (std::size_t i = rows.lo; i < rows.hi; ++i) {
          float* dst = plane + (i * s + u - p) * g.width;
          const float* src = src_rows + i * ow;
          if (s == 1) {
            // Unit stride: a contiguous add the compiler vectorizes (the general form's j s
            // index keeps it scalar; col2im was 60% of a 16-channel conv's backward).
            float* d = dst + (cols.lo + v - p);
            const float* a = src + cols.lo;
            for (std::size_t j = 0; j < cols.hi - cols.lo; ++j) d[j] += a[j];
          } else {
            for (std::size_t j = cols.lo; j < cols.hi; ++j) dst[j * s + v - p] += src[j];
          }
        }
      }
    }
  }
}

}  // namespace

std::pair<void*, Buffer<std::byte>::Release> CpuBackend::allocate_bytes(std::size_t bytes,
                                                                        MemoryKind /*kind*/) {
  if (bytes == 0) return {nullptr, &release_host};
  // 64-byte aligned (a cache line, an AVX-512 vector): oneDNN's reproducibility asks for the
  // same alignment from run to run.
  constexpr std::size_t kAlignment = 64;
  void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p != nullptr) std::memset(p, 0, bytes);
  if (p == nullptr) {
    throw DeviceError("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  return {p, &release_host};
}

void CpuBackend::copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  // In ranges over the kernel arena: an activation's copy (add's backward) is memory-bound, and
  // two cores draw more bandwidth than one.
  constexpr std::size_t kChunk = 4096;  // bytes an item
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  parallel_items((bytes + kChunk - 1) / kChunk, kChunk / sizeof(float),
                 [=](std::size_t lo, std::size_t hi) {
                   const std::size_t end = std::min(bytes, hi * kChunk);
                   std::memcpy(d + lo * kChunk, s + lo * kChunk, end - lo * kChunk);
                 });
}

void CpuBackend::copy_rows(float* dst, std::size_t dst_stride, const float* src,
                           std::size_t src_stride, std::size_t cols, std::size_t rows) {
  if (cols == 0) return;
  for (std::size_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, cols * sizeof(float));
  }
}

void CpuBackend::sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                       float alpha, const float* a, std::size_t lda, const float* b,
                       std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cpu::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CpuBackend::broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y) {
  for (std::size_t k = 0; k < rows; ++k) std::copy(row, row + cols, y + k * cols);
}

void CpuBackend::column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums) {
  std::fill(sums, sums + cols, 0.0f);
  for (std::size_t k = 0; k < rows; ++k) {
    const float* row = a + k * cols;
    for (std::size_t m = 0; m < cols; ++m) sums[m] += row[m];
  }
}

void CpuBackend::multiply(const float* a, const float* b, std::size_t n, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void CpuBackend::dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p,
                                 float scale, float* mask, float* y) {
  SplitMix64 rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    mask[i] = rng.next_float() < p ? 0.0f : scale;
    y[i] = x[i] * mask[i];
  }
}

void CpuBackend::relu_forward(const float* x, std::size_t n, float* y) {
  parallel_items(n, 1, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  });
}

void CpuBackend::relu_backward(const float* y, const float* dy, std::size_t n, float* dx) {
  // dy read unconditionally, so the compiler can select without a branch (a relu mask is random:
  // a branch mispredicts on half the units, ~10x slower).
  parallel_items(n, 1, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      const float g = dy[i];
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
  });
}

void CpuBackend::im2col(const float* x, std::size_t samples, const Im2colGeometry& g, float* col,
                        std::size_t ld) {
  parallel_items(samples, g.patch() * g.positions(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t s = lo; s < hi; ++s) {
      im2col_sample(x + s * g.sample_size(), g, col + s * g.positions(), ld);
    }
  });
}

void CpuBackend::col2im(const float* dcol, std::size_t ld, std::size_t samples,
                        const Im2colGeometry& g, float* dx) {
  parallel_items(samples, g.patch() * g.positions(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t s = lo; s < hi; ++s) {
      col2im_sample(dcol + s * g.positions(), ld, g, dx + s * g.sample_size());
    }
  });
}

void CpuBackend::unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                          std::size_t filters, std::size_t positions,
                                          const float* bias, float* y) {
  parallel_items(samples, filters * positions, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t s = lo; s < hi; ++s) {
      float* yn = y + s * filters * positions;
      for (std::size_t f = 0; f < filters; ++f) {
        const float* src = out + f * ld + s * positions;
        float* dst = yn + f * positions;
        for (std::size_t i = 0; i < positions; ++i) dst[i] = src[i] + bias[f];
      }
    }
  });
}

void CpuBackend::pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                               std::size_t positions, float* out, std::size_t ld,
                               float* bias_sums) {
  // By filter: each bias sum still adds its samples' sums in sample order.
  parallel_items(filters, samples * positions, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t f = lo; f < hi; ++f) {
      for (std::size_t s = 0; s < samples; ++s) {
        const float* src = dy + (s * filters + f) * positions;
        std::copy(src, src + positions, out + f * ld + s * positions);
        if (bias_sums != nullptr) {
          float sum = 0.0f;
          for (std::size_t i = 0; i < positions; ++i) sum += src[i];
          bias_sums[f] += sum;
        }
      }
    }
  });
}

void CpuBackend::fill(float* dst, std::size_t n, float value) { std::fill(dst, dst + n, value); }

void CpuBackend::scale(float* x, std::size_t n, float alpha) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuBackend::accumulate(float* sum, const float* x, std::size_t n) {
  parallel_items(n, 1, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) sum[i] += x[i];
  });
}

void CpuBackend::add(const float* a, const float* b, std::size_t n, float* y) {
  parallel_items(n, 1, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) y[i] = a[i] + b[i];
  });
}

void CpuBackend::add_relu(const float* a, const float* b, std::size_t n, float* y) {
  parallel_items(n, 1, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      const float sum = a[i] + b[i];
      y[i] = sum > 0.0f ? sum : 0.0f;  // relu_forward's expression: the same bits
    }
  });
}

void CpuBackend::sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                          const SgdOptions& options) {
  sgd_update(w, g, velocity, n, options);
}

void CpuBackend::adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                           const AdamOptions& options, const AdamStep& step) {
  adam_update(w, g, m, v, n, options, step);
}

void CpuBackend::batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                                       std::size_t spatial, float* mean, float* var) {
  const auto m = static_cast<float>(samples * spatial);
  parallel_items(channels, 2 * samples * spatial, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t c = lo; c < hi; ++c) {
      float total = 0.0f;
      for (std::size_t s = 0; s < samples; ++s) {
        const float* src = x + (s * channels + c) * spatial;
        float acc = 0.0f;
        for (std::size_t i = 0; i < spatial; ++i) acc += src[i];
        total += acc;
      }
      const float mu = total / m;
      float squares = 0.0f;
      for (std::size_t s = 0; s < samples; ++s) {
        const float* src = x + (s * channels + c) * spatial;
        float acc = 0.0f;
        for (std::size_t i = 0; i < spatial; ++i) acc += (src[i] - mu) * (src[i] - mu);
        squares += acc;
      }
      mean[c] = mu;
      var[c] = squares / m;
    }
  });
}

void CpuBackend::batch_norm_update(const float* mean, const float* var, std::size_t channels,
                                   float momentum, float unbias, float eps, float* running_mean,
                                   float* running_var, float* inv_std) {
  for (std::size_t c = 0; c < channels; ++c) {
    if (running_mean != nullptr) {
      running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
      running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbias * var[c];
    }
    inv_std[c] = 1.0f / std::sqrt(var[c] + eps);
  }
}

void CpuBackend::batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                                    std::size_t spatial, const float* mean, const float* inv_std,
                                    const float* gamma, const float* beta, float* y) {
  parallel_items(samples * channels, spatial, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      const std::size_t c = plane % channels, at = plane * spatial;
      const float scale = gamma[c] * inv_std[c], mu = mean[c], shift = beta[c];
      for (std::size_t i = 0; i < spatial; ++i) y[at + i] = scale * (x[at + i] - mu) + shift;
    }
  });
}

void CpuBackend::batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                                     std::size_t channels, std::size_t spatial, const float* mean,
                                     const float* inv_std, const float* gamma, float* dx,
                                     float* dgamma, float* dbeta) {
  parallel_items(channels, 2 * samples * spatial, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t c = lo; c < hi; ++c) {
      float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
      for (std::size_t s = 0; s < samples; ++s) {
        const std::size_t at = (s * channels + c) * spatial;
        float a = 0.0f, b = 0.0f;
        for (std::size_t i = 0; i < spatial; ++i) {
          a += dy[at + i];
          b += dy[at + i] * (x[at + i] - mean[c]) * inv_std[c];
        }
        sum_dy += a;
        sum_dy_xhat += b;
      }
      dbeta[c] = sum_dy;
      dgamma[c] = sum_dy_xhat;
    }
  });
  if (dx == nullptr) return;
  const auto m = static_cast<float>(samples * spatial);
  parallel_items(samples * channels, 3 * spatial, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      const std::size_t c = plane % channels, at = plane * spatial;
      const float scale = gamma[c] * inv_std[c], mean_dy = dbeta[c] / m,
                  mean_dy_xhat = dgamma[c] / m;
      for (std::size_t i = 0; i < spatial; ++i) {
        const float x_hat = (x[at + i] - mean[c]) * inv_std[c];
        dx[at + i] = scale * (dy[at + i] - mean_dy - x_hat * mean_dy_xhat);
      }
    }
  });
}

float CpuBackend::softmax_cross_entropy(const float* logits, std::span<const std::int32_t> labels,
                                        std::size_t classes, float* dlogits) {
  return SoftmaxCrossEntropy::forward_backward(logits, labels.data(), labels.size(), classes,
                                               dlogits);
}

std::unique_ptr<ConvolutionKernels> CpuBackend::make_convolution(const Im2colGeometry& g,
                                                                 std::size_t filters,
                                                                 std::size_t max_batch) {
#if GRADMESH_HAVE_ONEDNN
  if (kernels() == CpuKernels::kOnednn)
    return make_onednn_convolution(*this, g, filters, max_batch);
#endif
  (void)g, (void)filters, (void)max_batch;
  return nullptr;
}

std::unique_ptr<BatchNormKernels> CpuBackend::make_batch_norm(std::size_t channels,
                                                              std::size_t spatial,
                                                              std::size_t max_batch, float eps) {
#if GRADMESH_HAVE_ONEDNN
  if (kernels() == CpuKernels::kOnednn)
    return make_onednn_batch_norm(*this, channels, spatial, max_batch, eps);
#endif
  (void)channels, (void)spatial, (void)max_batch, (void)eps;
  return nullptr;
}

std::string CpuBackend::description() const {
  if (kernels() == CpuKernels::kOnednn) {
    return "CPU (" + blas_description() + ": " + onednn_kernel_names() + ")";
  }
  return "CPU (" + blas_description() + ")";
}

void set_kernels(CpuKernels k) {
  set_blas_library(k == CpuKernels::kOnednn ? BlasLibrary::kOnednn : BlasLibrary::kOpenBlas);
}

CpuKernels kernels() noexcept {
  return blas_library() == BlasLibrary::kOnednn ? CpuKernels::kOnednn : CpuKernels::kBuiltin;
}

const char* to_string(CpuKernels k) noexcept {
  return k == CpuKernels::kOnednn ? "onednn" : "builtin";
}

#if !GRADMESH_HAVE_ONEDNN
Layout preferred_blocked_layout() noexcept { return Layout::kNchw; }
std::string onednn_kernel_names() { return {}; }
#endif

Backend& host_backend() noexcept {
  static CpuBackend backend;
  return backend;
}

}  // namespace gradmesh::tasks::cpu

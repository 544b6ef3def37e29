// CUDA kernels of the CUDA backend (see kernels.h and tasks/backend.h for what each computes).
// Where it costs nothing, a kernel adds in the CPU backend's order (column sums, col2im, pooling's
// backward gather), so those results match the CPU bit for bit; the rest match within rounding.

#include "tasks/cuda/kernels.h"
#include "tasks/cuda/launch.cuh"

#include <cmath>

namespace gradmesh::tasks::cuda::kernels {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::launched;

__global__ void broadcast_rows_kernel(const float* row, std::size_t rows, std::size_t cols,
                                      float* y) {
  GM_FOR(i, rows * cols) { y[i] = row[i % cols]; }
}

__global__ void column_sums_kernel(const float* a, std::size_t rows, std::size_t cols,
                                   float* sums) {
  GM_FOR(j, cols) {
    float s = 0.0f;
    for (std::size_t k = 0; k < rows; ++k) s += a[k * cols + j];
    sums[j] = s;
  }
}

__global__ void multiply_kernel(const float* a, const float* b, std::size_t n, float* y) {
  GM_FOR(i, n) { y[i] = a[i] * b[i]; }
}

__device__ std::uint64_t splitmix_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__global__ void dropout_forward_kernel(const float* x, std::size_t n, std::uint64_t seed, float p,
                                       float scale, float* mask, float* y) {
  GM_FOR(i, n) {
    // Draw i of SplitMix64(seed): the state after i + 1 additions of the golden gamma.
    const std::uint64_t bits = splitmix_mix(seed + (i + 1) * 0x9E3779B97F4A7C15ULL);
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
    const float m = u < p ? 0.0f : scale;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void relu_forward_kernel(const float* x, std::size_t n, float* y) {
  GM_FOR(i, n) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, std::size_t n, float* dx) {
  GM_FOR(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

__global__ void fill_kernel(float* dst, std::size_t n, float value) {
  GM_FOR(i, n) { dst[i] = value; }
}

__global__ void scale_kernel(float* x, std::size_t n, float alpha) {
  GM_FOR(i, n) { x[i] = __fmul_rn(x[i], alpha); }
}

// One thread per element of col: (row r = (c k + u) k + v, sample s, position i OW + j).
__global__ void im2col_kernel(const float* x, std::size_t samples, ConvShape g, float* col,
                              std::size_t ld) {
  const std::size_t positions = g.out_height * g.out_width;
  const std::size_t patch = g.channels * g.kernel * g.kernel;
  GM_FOR(t, patch * samples * positions) {
    const std::size_t pos = t % positions;
    const std::size_t s = (t / positions) % samples;
    const std::size_t r = t / (positions * samples);
    const std::size_t v = r % g.kernel, u = (r / g.kernel) % g.kernel,
                      c = r / (g.kernel * g.kernel);
    const std::size_t i = pos / g.out_width, j = pos % g.out_width;
    const long long h =
        static_cast<long long>(i * g.stride + u) - static_cast<long long>(g.padding);
    const long long w =
        static_cast<long long>(j * g.stride + v) - static_cast<long long>(g.padding);
    float value = 0.0f;
    if (h >= 0 && w >= 0 && h < static_cast<long long>(g.height) &&
        w < static_cast<long long>(g.width)) {
      value = x[s * g.channels * g.height * g.width + (c * g.height + h) * g.width + w];
    }
    col[r * ld + s * positions + pos] = value;
  }
}

// One thread per input pixel (s, c, h, w): the sum of the col entries read from it, in the CPU's
// order (u, then v).
__global__ void col2im_kernel(const float* dcol, std::size_t ld, std::size_t samples, ConvShape g,
                              float* dx) {
  const std::size_t positions = g.out_height * g.out_width;
  const std::size_t plane = g.height * g.width;
  GM_FOR(t, samples * g.channels * plane) {
    const std::size_t w = t % g.width, h = (t / g.width) % g.height;
    const std::size_t c = (t / plane) % g.channels, s = t / (plane * g.channels);
    float sum = 0.0f;
    for (std::size_t u = 0; u < g.kernel; ++u) {
      // h = i stride + u - padding for an output row i.
      const long long hi = static_cast<long long>(h + g.padding) - static_cast<long long>(u);
      if (hi < 0 || hi % static_cast<long long>(g.stride) != 0) continue;
      const std::size_t i = static_cast<std::size_t>(hi) / g.stride;
      if (i >= g.out_height) continue;
      for (std::size_t v = 0; v < g.kernel; ++v) {
        const long long wj = static_cast<long long>(w + g.padding) - static_cast<long long>(v);
        if (wj < 0 || wj % static_cast<long long>(g.stride) != 0) continue;
        const std::size_t j = static_cast<std::size_t>(wj) / g.stride;
        if (j >= g.out_width) continue;
        const std::size_t r = (c * g.kernel + u) * g.kernel + v;
        sum += dcol[r * ld + s * positions + i * g.out_width + j];
      }
    }
    dx[t] = sum;
  }
}

__global__ void unpack_kernel(const float* out, std::size_t ld, std::size_t samples,
                              std::size_t filters, std::size_t positions, const float* bias,
                              float* y) {
  GM_FOR(t, samples * filters * positions) {
    const std::size_t i = t % positions, f = (t / positions) % filters,
                      s = t / (positions * filters);
    y[t] = out[f * ld + s * positions + i] + bias[f];
  }
}

__global__ void pack_kernel(const float* dy, std::size_t samples, std::size_t filters,
                            std::size_t positions, float* out, std::size_t ld) {
  GM_FOR(t, samples * filters * positions) {
    const std::size_t i = t % positions, f = (t / positions) % filters,
                      s = t / (positions * filters);
    out[f * ld + s * positions + i] = dy[t];
  }
}

// The sum of every thread's `acc` over the block (blockDim.x a power of two, <= kThreads), through
// `partial` (kThreads floats of shared memory), in a fixed tree order; every thread gets it.
__device__ float block_sum(float acc, float* partial) {
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float sum = partial[0];
  __syncthreads();
  return sum;
}

// One block per channel c of x (samples x channels x spatial): the sum over samples, in order,
// of each sample's block sum of f(x) over its spatial floats, f(x) = x, or (x - *mean)^2 when
// `mean` is given. As the CPU: each sample's sum first.
__device__ float channel_sum(const float* x, std::size_t samples, std::size_t channels,
                             std::size_t spatial, std::size_t c, const float* mean,
                             float* partial) {
  float total = 0.0f;
  for (std::size_t s = 0; s < samples; ++s) {
    const float* src = x + (s * channels + c) * spatial;
    float acc = 0.0f;
    for (std::size_t i = threadIdx.x; i < spatial; i += blockDim.x) {
      acc += mean == nullptr ? src[i] : (src[i] - *mean) * (src[i] - *mean);
    }
    total += block_sum(acc, partial);
  }
  return total;
}

// One block per filter f: bias_sums[f] += the sum of dy over the samples and positions.
__global__ void bias_sums_kernel(const float* dy, std::size_t samples, std::size_t filters,
                                 std::size_t positions, float* bias_sums) {
  __shared__ float partial[kThreads];
  const float total = channel_sum(dy, samples, filters, positions, blockIdx.x, nullptr, partial);
  if (threadIdx.x == 0) bias_sums[blockIdx.x] += total;
}

// The outputs o in [lo, hi] whose window covers input position p along one axis:
// o stride <= p < o stride + window (lo > hi when the stride skips p).
__device__ void covering_outputs(std::size_t p, std::size_t window, std::size_t stride,
                                 std::size_t outputs, std::size_t& lo, std::size_t& hi) {
  lo = p + 1 > window ? (p + 1 - window + stride - 1) / stride : 0;
  hi = p / stride < outputs ? p / stride : outputs - 1;
}

__global__ void max_pool_forward_kernel(const float* x, std::size_t planes, PoolShape g, float* y,
                                        std::uint32_t* argmax) {
  const std::size_t out_plane = g.out_height * g.out_width;
  GM_FOR(t, planes * out_plane) {
    const std::size_t o = t % out_plane, plane = t / out_plane;
    const std::size_t i = o / g.out_width, j = o % g.out_width;
    const float* src = x + plane * g.height * g.width;
    std::size_t best = i * g.stride * g.width + j * g.stride;
    for (std::size_t u = 0; u < g.window; ++u) {
      const std::size_t row = (i * g.stride + u) * g.width + j * g.stride;
      for (std::size_t v = 0; v < g.window; ++v) {
        if (src[row + v] > src[best]) best = row + v;
      }
    }
    y[t] = src[best];
    argmax[t] = static_cast<std::uint32_t>(best);
  }
}

// One thread per input pixel: the dy of every output whose window covers it and chose it, in
// ascending output order (the CPU's), so overlapping windows add up deterministically.
__global__ void max_pool_backward_kernel(const float* dy, const std::uint32_t* argmax,
                                         std::size_t planes, PoolShape g, float* dx) {
  const std::size_t in_plane = g.height * g.width, out_plane = g.out_height * g.out_width;
  GM_FOR(t, planes * in_plane) {
    const std::size_t p = t % in_plane, plane = t / in_plane;
    const std::size_t h = p / g.width, w = p % g.width;
    std::size_t i_lo, i_hi, j_lo, j_hi;
    covering_outputs(h, g.window, g.stride, g.out_height, i_lo, i_hi);
    covering_outputs(w, g.window, g.stride, g.out_width, j_lo, j_hi);
    float sum = 0.0f;
    for (std::size_t i = i_lo; i <= i_hi; ++i) {
      for (std::size_t j = j_lo; j <= j_hi; ++j) {
        const std::size_t o = plane * out_plane + i * g.out_width + j;
        if (argmax[o] == p) sum += dy[o];
      }
    }
    dx[t] = sum;
  }
}

__global__ void avg_pool_forward_kernel(const float* x, std::size_t planes, PoolShape g, float* y) {
  const std::size_t out_plane = g.out_height * g.out_width;
  const float scale = 1.0f / static_cast<float>(g.window * g.window);
  GM_FOR(t, planes * out_plane) {
    const std::size_t o = t % out_plane, plane = t / out_plane;
    const std::size_t i = o / g.out_width, j = o % g.out_width;
    const float* src = x + plane * g.height * g.width;
    float sum = 0.0f;
    for (std::size_t u = 0; u < g.window; ++u) {
      const float* row = src + (i * g.stride + u) * g.width + j * g.stride;
      for (std::size_t v = 0; v < g.window; ++v) sum += row[v];
    }
    y[t] = sum * scale;
  }
}

// One thread per input pixel, the covering outputs in ascending order as max_pool_backward.
__global__ void avg_pool_backward_kernel(const float* dy, std::size_t planes, PoolShape g,
                                         float* dx) {
  const std::size_t in_plane = g.height * g.width, out_plane = g.out_height * g.out_width;
  const float scale = 1.0f / static_cast<float>(g.window * g.window);
  GM_FOR(t, planes * in_plane) {
    const std::size_t p = t % in_plane, plane = t / in_plane;
    const std::size_t h = p / g.width, w = p % g.width;
    std::size_t i_lo, i_hi, j_lo, j_hi;
    covering_outputs(h, g.window, g.stride, g.out_height, i_lo, i_hi);
    covering_outputs(w, g.window, g.stride, g.out_width, j_lo, j_hi);
    float sum = 0.0f;
    for (std::size_t i = i_lo; i <= i_hi; ++i) {
      for (std::size_t j = j_lo; j <= j_hi; ++j) {
        sum += dy[plane * out_plane + i * g.out_width + j] * scale;
      }
    }
    dx[t] = sum;
  }
}

__global__ void batch_norm_statistics_kernel(const float* x, std::size_t samples,
                                             std::size_t channels, std::size_t spatial, float* mean,
                                             float* var) {
  __shared__ float partial[kThreads];
  __shared__ float mu;
  const std::size_t c = blockIdx.x;
  const auto m = static_cast<float>(samples * spatial);
  const float total = channel_sum(x, samples, channels, spatial, c, nullptr, partial);
  if (threadIdx.x == 0) mu = total / m;
  __syncthreads();
  const float squares = channel_sum(x, samples, channels, spatial, c, &mu, partial);
  if (threadIdx.x == 0) {
    mean[c] = mu;
    var[c] = squares / m;
  }
}

__global__ void batch_norm_update_kernel(const float* mean, const float* var, std::size_t channels,
                                         float momentum, float unbias, float eps,
                                         float* running_mean, float* running_var, float* inv_std) {
  GM_FOR(c, channels) {
    if (running_mean != nullptr) {
      running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
      running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbias * var[c];
    }
    inv_std[c] = 1.0f / sqrtf(var[c] + eps);
  }
}

__global__ void batch_norm_forward_kernel(const float* x, std::size_t samples, std::size_t channels,
                                          std::size_t spatial, const float* mean,
                                          const float* inv_std, const float* gamma,
                                          const float* beta, float* y) {
  GM_FOR(t, samples * channels * spatial) {
    const std::size_t c = (t / spatial) % channels;
    y[t] = gamma[c] * inv_std[c] * (x[t] - mean[c]) + beta[c];
  }
}

// One block per channel: dbeta = sum dy, dgamma = sum dy x_hat, per sample then in order.
__global__ void batch_norm_parameter_gradients_kernel(const float* x, const float* dy,
                                                      std::size_t samples, std::size_t channels,
                                                      std::size_t spatial, const float* mean,
                                                      const float* inv_std, float* dgamma,
                                                      float* dbeta) {
  __shared__ float partial[kThreads];
  const std::size_t c = blockIdx.x;
  float total_dy = 0.0f, total_xhat = 0.0f;
  for (std::size_t s = 0; s < samples; ++s) {
    const std::size_t at = (s * channels + c) * spatial;
    float a = 0.0f, b = 0.0f;
    for (std::size_t i = threadIdx.x; i < spatial; i += blockDim.x) {
      a += dy[at + i];
      b += dy[at + i] * (x[at + i] - mean[c]) * inv_std[c];
    }
    total_dy += block_sum(a, partial);
    total_xhat += block_sum(b, partial);
  }
  if (threadIdx.x == 0) {
    dbeta[c] = total_dy;
    dgamma[c] = total_xhat;
  }
}

__global__ void batch_norm_input_gradient_kernel(const float* x, const float* dy,
                                                 std::size_t samples, std::size_t channels,
                                                 std::size_t spatial, const float* mean,
                                                 const float* inv_std, const float* gamma,
                                                 const float* dgamma, const float* dbeta,
                                                 float* dx) {
  const auto m = static_cast<float>(samples * spatial);
  GM_FOR(t, samples * channels * spatial) {
    const std::size_t c = (t / spatial) % channels;
    const float x_hat = (x[t] - mean[c]) * inv_std[c];
    dx[t] = gamma[c] * inv_std[c] * (dy[t] - dbeta[c] / m - x_hat * (dgamma[c] / m));
  }
}

__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels,
                                             std::size_t batch, std::size_t classes, float* dlogits,
                                             double* row_losses) {
  const double inv_batch = 1.0 / static_cast<double>(batch);
  GM_FOR(k, batch) {
    const float* row = logits + k * classes;
    float* drow = dlogits + k * classes;
    const std::int32_t label = labels[k];
    float m = row[0];
    for (std::size_t c = 1; c < classes; ++c) m = row[c] > m ? row[c] : m;
    const double z_label = static_cast<double>(row[label]) - m;
    double sum = 0.0;
    for (std::size_t c = 0; c < classes; ++c) {
      const double e = exp(static_cast<double>(row[c]) - m);
      drow[c] = static_cast<float>(e);
      sum += e;
    }
    row_losses[k] = log(sum) - z_label;
    const double scale = inv_batch / sum;
    for (std::size_t c = 0; c < classes; ++c) {
      drow[c] = static_cast<float>(static_cast<double>(drow[c]) * scale);
    }
    drow[label] -= static_cast<float>(inv_batch);
  }
}

}  // namespace

cudaError_t broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y,
                           cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  broadcast_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(row, rows, cols, y);
  return launched();
}

cudaError_t column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums,
                        cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  column_sums_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(a, rows, cols, sums);
  return launched();
}

cudaError_t multiply(const float* a, const float* b, std::size_t n, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  multiply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, n, y);
  return launched();
}

cudaError_t dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p, float scale,
                            float* mask, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dropout_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, seed, p, scale, mask, y);
  return launched();
}

cudaError_t relu_forward(const float* x, std::size_t n, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, y);
  return launched();
}

cudaError_t relu_backward(const float* y, const float* dy, std::size_t n, float* dx,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, dy, n, dx);
  return launched();
}

cudaError_t fill(float* dst, std::size_t n, float value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, n, value);
  return launched();
}

cudaError_t scale(float* x, std::size_t n, float alpha, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, alpha);
  return launched();
}

cudaError_t im2col(const float* x, std::size_t samples, const ConvShape& g, float* col,
                   std::size_t ld, cudaStream_t stream) {
  const std::size_t n = g.channels * g.kernel * g.kernel * samples * g.out_height * g.out_width;
  if (n == 0) return cudaSuccess;
  im2col_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, samples, g, col, ld);
  return launched();
}

cudaError_t col2im(const float* dcol, std::size_t ld, std::size_t samples, const ConvShape& g,
                   float* dx, cudaStream_t stream) {
  const std::size_t n = samples * g.channels * g.height * g.width;
  if (n == 0) return cudaSuccess;
  col2im_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dcol, ld, samples, g, dx);
  return launched();
}

cudaError_t unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                     std::size_t filters, std::size_t positions, const float* bias,
                                     float* y, cudaStream_t stream) {
  const std::size_t n = samples * filters * positions;
  if (n == 0) return cudaSuccess;
  unpack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, ld, samples, filters, positions, bias,
                                                        y);
  return launched();
}

cudaError_t pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                          std::size_t positions, float* out, std::size_t ld, float* bias_sums,
                          cudaStream_t stream) {
  const std::size_t n = samples * filters * positions;
  if (n == 0) return cudaSuccess;
  pack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, samples, filters, positions, out, ld);
  if (bias_sums != nullptr) {
    bias_sums_kernel<<<static_cast<unsigned>(filters), kThreads, 0, stream>>>(dy, samples, filters,
                                                                              positions, bias_sums);
  }
  return launched();
}

cudaError_t max_pool_forward(const float* x, std::size_t planes, const PoolShape& g, float* y,
                             std::uint32_t* argmax, cudaStream_t stream) {
  const std::size_t n = planes * g.out_height * g.out_width;
  if (n == 0) return cudaSuccess;
  max_pool_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, planes, g, y, argmax);
  return launched();
}

cudaError_t max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                              const PoolShape& g, float* dx, cudaStream_t stream) {
  const std::size_t n = planes * g.height * g.width;
  if (n == 0) return cudaSuccess;
  max_pool_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, argmax, planes, g, dx);
  return launched();
}

cudaError_t batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                                  std::size_t spatial, float* mean, float* var,
                                  cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  batch_norm_statistics_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      x, samples, channels, spatial, mean, var);
  return launched();
}

cudaError_t batch_norm_update(const float* mean, const float* var, std::size_t channels,
                              float momentum, float unbias, float eps, float* running_mean,
                              float* running_var, float* inv_std, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  batch_norm_update_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(
      mean, var, channels, momentum, unbias, eps, running_mean, running_var, inv_std);
  return launched();
}

cudaError_t batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                               std::size_t spatial, const float* mean, const float* inv_std,
                               const float* gamma, const float* beta, float* y,
                               cudaStream_t stream) {
  const std::size_t n = samples * channels * spatial;
  if (n == 0) return cudaSuccess;
  batch_norm_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, samples, channels, spatial,
                                                                    mean, inv_std, gamma, beta, y);
  return launched();
}

cudaError_t batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                                std::size_t channels, std::size_t spatial, const float* mean,
                                const float* inv_std, const float* gamma, float* dx, float* dgamma,
                                float* dbeta, cudaStream_t stream) {
  const std::size_t n = samples * channels * spatial;
  if (channels == 0) return cudaSuccess;
  batch_norm_parameter_gradients_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      x, dy, samples, channels, spatial, mean, inv_std, dgamma, dbeta);
  if (dx != nullptr && n > 0) {
    batch_norm_input_gradient_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        x, dy, samples, channels, spatial, mean, inv_std, gamma, dgamma, dbeta, dx);
  }
  return launched();
}

cudaError_t avg_pool_forward(const float* x, std::size_t planes, const PoolShape& g, float* y,
                             cudaStream_t stream) {
  const std::size_t n = planes * g.out_height * g.out_width;
  if (n == 0) return cudaSuccess;
  avg_pool_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, planes, g, y);
  return launched();
}

cudaError_t avg_pool_backward(const float* dy, std::size_t planes, const PoolShape& g, float* dx,
                              cudaStream_t stream) {
  const std::size_t n = planes * g.height * g.width;
  if (n == 0) return cudaSuccess;
  avg_pool_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, planes, g, dx);
  return launched();
}

cudaError_t softmax_cross_entropy(const float* logits, const std::int32_t* labels,
                                  std::size_t batch, std::size_t classes, float* dlogits,
                                  double* row_losses, cudaStream_t stream) {
  if (batch == 0 || classes == 0) return cudaSuccess;
  softmax_cross_entropy_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(
      logits, labels, batch, classes, dlogits, row_losses);
  return launched();
}

}  // namespace gradmesh::tasks::cuda::kernels

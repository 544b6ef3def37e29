#include "tasks/cpu/blocked_kernels.h"

#include <type_traits>

#include "engine/error.h"
#include "tasks/cpu/parallel.h"

namespace gradmesh::tasks::cpu {

namespace {

template <std::size_t kBlock>
void batch_norm_statistics_blocked_impl(const float* x, std::size_t samples, std::size_t channels,
                                        std::size_t spatial, float* mean, float* var) {
  const std::size_t blocks = channels / kBlock;
  const auto m = static_cast<float>(samples * spatial);
  parallel_items(blocks, 2 * samples * spatial * kBlock, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t cb = lo; cb < hi; ++cb) {
      float total[kBlock] = {}, mu[kBlock], squares[kBlock] = {};
      for (std::size_t s = 0; s < samples; ++s) {
        const float* src = x + (s * blocks + cb) * spatial * kBlock;
        float acc[kBlock] = {};
        for (std::size_t i = 0; i < spatial; ++i) {
          for (std::size_t l = 0; l < kBlock; ++l) acc[l] += src[i * kBlock + l];
        }
        for (std::size_t l = 0; l < kBlock; ++l) total[l] += acc[l];
      }
      for (std::size_t l = 0; l < kBlock; ++l) mu[l] = total[l] / m;
      for (std::size_t s = 0; s < samples; ++s) {
        const float* src = x + (s * blocks + cb) * spatial * kBlock;
        float acc[kBlock] = {};
        for (std::size_t i = 0; i < spatial; ++i) {
          for (std::size_t l = 0; l < kBlock; ++l) {
            const float d = src[i * kBlock + l] - mu[l];
            acc[l] += d * d;
          }
        }
        for (std::size_t l = 0; l < kBlock; ++l) squares[l] += acc[l];
      }
      for (std::size_t l = 0; l < kBlock; ++l) {
        mean[cb * kBlock + l] = mu[l];
        var[cb * kBlock + l] = squares[l] / m;
      }
    }
  });
}

template <std::size_t kBlock>
void batch_norm_forward_blocked_impl(const float* x, std::size_t samples, std::size_t channels,
                                     std::size_t spatial, const float* mean, const float* inv_std,
                                     const float* gamma, const float* beta, float* y) {
  const std::size_t blocks = channels / kBlock;
  parallel_items(samples * blocks, spatial * kBlock, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      const std::size_t c0 = (plane % blocks) * kBlock, at = plane * spatial * kBlock;
      float scale[kBlock], mu[kBlock], shift[kBlock];
      for (std::size_t l = 0; l < kBlock; ++l) {
        scale[l] = gamma[c0 + l] * inv_std[c0 + l];
        mu[l] = mean[c0 + l];
        shift[l] = beta[c0 + l];
      }
      for (std::size_t i = 0; i < spatial; ++i) {
        for (std::size_t l = 0; l < kBlock; ++l) {
          const std::size_t k = at + i * kBlock + l;
          y[k] = scale[l] * (x[k] - mu[l]) + shift[l];
        }
      }
    }
  });
}

template <std::size_t kBlock>
void batch_norm_backward_blocked_impl(const float* x, const float* dy, std::size_t samples,
                                      std::size_t channels, std::size_t spatial, const float* mean,
                                      const float* inv_std, const float* gamma, float* dx,
                                      float* dgamma, float* dbeta) {
  const std::size_t blocks = channels / kBlock;
  parallel_items(blocks, 2 * samples * spatial * kBlock, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t cb = lo; cb < hi; ++cb) {
      const std::size_t c0 = cb * kBlock;
      float sum_dy[kBlock] = {}, sum_dy_xhat[kBlock] = {};
      for (std::size_t s = 0; s < samples; ++s) {
        const std::size_t at = (s * blocks + cb) * spatial * kBlock;
        float a[kBlock] = {}, b[kBlock] = {};
        for (std::size_t i = 0; i < spatial; ++i) {
          for (std::size_t l = 0; l < kBlock; ++l) {
            const std::size_t k = at + i * kBlock + l;
            a[l] += dy[k];
            b[l] += dy[k] * (x[k] - mean[c0 + l]) * inv_std[c0 + l];
          }
        }
        for (std::size_t l = 0; l < kBlock; ++l) {
          sum_dy[l] += a[l];
          sum_dy_xhat[l] += b[l];
        }
      }
      for (std::size_t l = 0; l < kBlock; ++l) {
        dbeta[c0 + l] = sum_dy[l];
        dgamma[c0 + l] = sum_dy_xhat[l];
      }
    }
  });
  if (dx == nullptr) return;
  const auto m = static_cast<float>(samples * spatial);
  parallel_items(samples * blocks, 3 * spatial * kBlock, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      const std::size_t c0 = (plane % blocks) * kBlock, at = plane * spatial * kBlock;
      float scale[kBlock], mean_dy[kBlock], mean_dy_xhat[kBlock], mu[kBlock], is[kBlock];
      for (std::size_t l = 0; l < kBlock; ++l) {
        scale[l] = gamma[c0 + l] * inv_std[c0 + l];
        mean_dy[l] = dbeta[c0 + l] / m;
        mean_dy_xhat[l] = dgamma[c0 + l] / m;
        mu[l] = mean[c0 + l];
        is[l] = inv_std[c0 + l];
      }
      for (std::size_t i = 0; i < spatial; ++i) {
        for (std::size_t l = 0; l < kBlock; ++l) {
          const std::size_t k = at + i * kBlock + l;
          const float x_hat = (x[k] - mu[l]) * is[l];
          dx[k] = scale[l] * (dy[k] - mean_dy[l] - x_hat * mean_dy_xhat[l]);
        }
      }
    }
  });
}

template <std::size_t kBlock>
void global_avg_pool_forward_blocked_impl(const float* x, std::size_t samples, std::size_t channels,
                                          std::size_t spatial, float* y) {
  const std::size_t blocks = channels / kBlock;
  const float scale = 1.0f / static_cast<float>(spatial);
  for (std::size_t plane = 0; plane < samples * blocks; ++plane) {
    const float* src = x + plane * spatial * kBlock;
    float acc[kBlock] = {};
    for (std::size_t i = 0; i < spatial; ++i) {
      for (std::size_t l = 0; l < kBlock; ++l) acc[l] += src[i * kBlock + l];
    }
    // plane = n blocks + cb: channel cb B + l of sample n, at y[n C + cb B + l] = y[plane B + l].
    for (std::size_t l = 0; l < kBlock; ++l) y[plane * kBlock + l] = acc[l] * scale;
  }
}

template <std::size_t kBlock>
void global_avg_pool_backward_blocked_impl(const float* dy, std::size_t samples,
                                           std::size_t channels, std::size_t spatial, float* dx) {
  const std::size_t blocks = channels / kBlock;
  const float scale = 1.0f / static_cast<float>(spatial);
  for (std::size_t plane = 0; plane < samples * blocks; ++plane) {
    float share[kBlock];
    for (std::size_t l = 0; l < kBlock; ++l) share[l] = dy[plane * kBlock + l] * scale;
    float* dst = dx + plane * spatial * kBlock;
    for (std::size_t i = 0; i < spatial; ++i) {
      for (std::size_t l = 0; l < kBlock; ++l) dst[i * kBlock + l] = share[l];
    }
  }
}

/// Calls f(std::integral_constant<std::size_t, block>) for block 8 or 16.
template <class F>
void by_block(std::size_t block, F&& f) {
  GRADMESH_CHECK(block == 8 || block == 16, "blocked kernels: a block of 8 or 16 channels");
  if (block == 8) {
    f(std::integral_constant<std::size_t, 8>{});
  } else {
    f(std::integral_constant<std::size_t, 16>{});
  }
}

}  // namespace

void batch_norm_statistics_blocked(std::size_t block, const float* x, std::size_t samples,
                                   std::size_t channels, std::size_t spatial, float* mean,
                                   float* var) {
  by_block(block, [&](auto b) {
    batch_norm_statistics_blocked_impl<decltype(b)::value>(x, samples, channels, spatial, mean,
                                                           var);
  });
}

void batch_norm_forward_blocked(std::size_t block, const float* x, std::size_t samples,
                                std::size_t channels, std::size_t spatial, const float* mean,
                                const float* inv_std, const float* gamma, const float* beta,
                                float* y) {
  by_block(block, [&](auto b) {
    batch_norm_forward_blocked_impl<decltype(b)::value>(x, samples, channels, spatial, mean,
                                                        inv_std, gamma, beta, y);
  });
}

void batch_norm_backward_blocked(std::size_t block, const float* x, const float* dy,
                                 std::size_t samples, std::size_t channels, std::size_t spatial,
                                 const float* mean, const float* inv_std, const float* gamma,
                                 float* dx, float* dgamma, float* dbeta) {
  by_block(block, [&](auto b) {
    batch_norm_backward_blocked_impl<decltype(b)::value>(x, dy, samples, channels, spatial, mean,
                                                         inv_std, gamma, dx, dgamma, dbeta);
  });
}

void global_avg_pool_forward_blocked(std::size_t block, const float* x, std::size_t samples,
                                     std::size_t channels, std::size_t spatial, float* y) {
  by_block(block, [&](auto b) {
    global_avg_pool_forward_blocked_impl<decltype(b)::value>(x, samples, channels, spatial, y);
  });
}

void global_avg_pool_backward_blocked(std::size_t block, const float* dy, std::size_t samples,
                                      std::size_t channels, std::size_t spatial, float* dx) {
  by_block(block, [&](auto b) {
    global_avg_pool_backward_blocked_impl<decltype(b)::value>(dy, samples, channels, spatial, dx);
  });
}

}  // namespace gradmesh::tasks::cpu

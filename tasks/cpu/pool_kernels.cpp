#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tasks/cpu/cpu_backend.h"
#include "tasks/cpu/parallel.h"

// The CPU backend's pooling kernels (max and average over windows of each plane).

namespace gradmesh::tasks::cpu {

void CpuBackend::max_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g,
                                  float* y, std::uint32_t* argmax) {
  const std::size_t oh = g.out_height, ow = g.out_width, stride = g.stride, window = g.window;
  parallel_items(planes, g.height * g.width, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      const float* src = x + plane * g.height * g.width;
      float* dst = y + plane * oh * ow;
      std::uint32_t* arg = argmax + plane * oh * ow;
      for (std::size_t i = 0; i < oh; ++i) {
        for (std::size_t j = 0; j < ow; ++j) {
          std::size_t best = i * stride * g.width + j * stride;
          for (std::size_t u = 0; u < window; ++u) {
            const std::size_t row = (i * stride + u) * g.width + j * stride;
            for (std::size_t v = 0; v < window; ++v) {
              if (src[row + v] > src[best]) best = row + v;
            }
          }
          dst[i * ow + j] = src[best];
          arg[i * ow + j] = static_cast<std::uint32_t>(best);
        }
      }
    }
  });
}

void CpuBackend::max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                                   const PoolGeometry& g, float* dx) {
  const std::size_t in_plane = g.height * g.width;
  const std::size_t out_plane = g.out_height * g.out_width;
  parallel_items(planes, in_plane, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      float* dst = dx + plane * in_plane;
      std::fill(dst, dst + in_plane, 0.0f);
      const float* src = dy + plane * out_plane;
      const std::uint32_t* arg = argmax + plane * out_plane;
      for (std::size_t o = 0; o < out_plane; ++o) dst[arg[o]] += src[o];
    }
  });
}

void CpuBackend::avg_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g,
                                  float* y) {
  const std::size_t oh = g.out_height, ow = g.out_width, stride = g.stride, window = g.window;
  const float scale = 1.0f / static_cast<float>(window * window);
  parallel_items(planes, g.height * g.width, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      const float* src = x + plane * g.height * g.width;
      float* dst = y + plane * oh * ow;
      for (std::size_t i = 0; i < oh; ++i) {
        for (std::size_t j = 0; j < ow; ++j) {
          float sum = 0.0f;
          for (std::size_t u = 0; u < window; ++u) {
            const float* row = src + (i * stride + u) * g.width + j * stride;
            for (std::size_t v = 0; v < window; ++v) sum += row[v];
          }
          dst[i * ow + j] = sum * scale;
        }
      }
    }
  });
}

void CpuBackend::avg_pool_backward(const float* dy, std::size_t planes, const PoolGeometry& g,
                                   float* dx) {
  const std::size_t in_plane = g.height * g.width, oh = g.out_height, ow = g.out_width;
  const float scale = 1.0f / static_cast<float>(g.window * g.window);
  parallel_items(planes, in_plane, [=](std::size_t lo, std::size_t hi) {
    for (std::size_t plane = lo; plane < hi; ++plane) {
      float* dst = dx + plane * in_plane;
      std::fill(dst, dst + in_plane, 0.0f);
      const float* src = dy + plane * oh * ow;
      for (std::size_t i = 0; i < oh; ++i) {
        for (std::size_t j = 0; j < ow; ++j) {
          const float share = src[i * ow + j] * scale;
          for (std::size_t u = 0; u < g.window; ++u) {
            float* row = dst + (i * g.stride + u) * g.width + j * g.stride;
            for (std::size_t v = 0; v < g.window; ++v) row[v] += share;
          }
        }
      }
    }
  });
}

}  // namespace gradmesh::tasks::cpu

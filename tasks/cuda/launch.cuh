#pragma once
// The launch helpers every CUDA kernel file of the backend shares: threads a block, the grid for
// n elements, the grid-stride loop and the launch's error.

#include <cuda_runtime_api.h>

#include <cstddef>

namespace gradmesh::tasks::cuda::kernels::detail {

inline constexpr unsigned kThreads = 256;

/// Blocks of kThreads for n elements, at least 1, at most `most` (a grid-stride loop covers the
/// rest).
inline unsigned blocks_for(std::size_t n, std::size_t most = 65535u * 16u) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < most ? (b == 0 ? 1 : b) : most);
}

/// The error of the last launch (cudaSuccess when it was queued).
inline cudaError_t launched() { return cudaGetLastError(); }

}  // namespace gradmesh::tasks::cuda::kernels::detail

/// Grid-stride loop over [0, n).
#define GM_FOR(i, n)                                                                             \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

#pragma once
// The CUDA compute backend: device memory, cuBLAS sgemm and the kernels of tasks/cuda/kernels.cu.
// Built only when CMake finds the CUDA toolkit (GRADMESH_HAVE_CUDA); tasks/make_backend.h is the
// way in for everything else.

#include <memory>
#include <string>

#include "tasks/backend.h"

namespace gradmesh::tasks::cuda {

/// What the CUDA runtime says about visible GPUs: count, or the error of cudaGetDeviceCount.
struct DeviceProbe {
  int count = 0;      ///< GPUs visible to this process (0 on error)
  std::string error;  ///< empty, or "cudaErrorNoDevice (no CUDA-capable device is detected)"
  /// Why no backend can be made, in words, naming what was looked for; empty when count > 0.
  [[nodiscard]] std::string reason() const;
};

/// Asks the CUDA runtime (cudaGetDeviceCount) how many GPUs this process sees. Never throws.
[[nodiscard]] DeviceProbe probe_devices() noexcept;

/// A CudaBackend on device 0: one non-blocking stream, one cuBLAS handle on it (FP32 math, no
/// TF32, so results stay within 1e-4 of the CPU's), device memory from cudaMalloc and staging from
/// cudaMallocHost. Kernels run asynchronously on the stream (see Backend). Throws
/// gradmesh::ConfigError with DeviceProbe::reason() when no GPU is visible, DeviceError when the
/// stream or cuBLAS handle cannot be created.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend();

}  // namespace gradmesh::tasks::cuda

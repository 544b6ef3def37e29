#pragma once
// The CUDA compute backend: device memory, cuBLAS sgemm and the kernels of tasks/cuda/kernels.cu.
// Built only when CMake finds the CUDA toolkit (GRADMESH_HAVE_CUDA), as a shared module of its own,
// libgradmesh_cuda.so, the only binary that links the CUDA libraries: tasks/make_backend.h loads it
// (dlopen) when compute.device = "cuda" and is the way in for everything else, so gradmesh-node and
// programs built against an installed gradmesh need neither the CUDA toolkit nor its libraries
// unless they train on a GPU.

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

/// The module's entry point's name, for dlsym: kMakeBackendSymbol names a function of type
/// MakeBackendFn that returns make_cuda_backend().release() (the caller owns it) and throws as
/// make_cuda_backend(). The module stays loaded for the life of the process (its code backs every
/// backend it made).
inline constexpr const char* kMakeBackendSymbol = "gradmesh_cuda_make_backend";
using MakeBackendFn = Backend* (*)();

}  // namespace gradmesh::tasks::cuda

extern "C" gradmesh::tasks::Backend* gradmesh_cuda_make_backend();

#pragma once
// Chooses the compute backend by name (the job config's compute.device).

#include <memory>
#include <string_view>

#include "tasks/backend.h"

namespace gradmesh::tasks {

/// Whether this binary was built with the CUDA backend (CMake found the CUDA toolkit and
/// GRADMESH_WITH_CUDA was ON).
[[nodiscard]] bool cuda_built() noexcept;

/// A new backend for `device`: "cpu" (tasks/cpu/, OpenBLAS) or "cuda" (tasks/cuda/, cuBLAS, on
/// CUDA device 0, from the module libgradmesh_cuda.so, loaded on first use: beside the program in
/// ../lib/, else where CMake installs or built it, else the loader's path; $GRADMESH_CUDA_MODULE
/// names it instead). Throws gradmesh::ConfigError naming compute.device and what was expected
/// when the name is unknown, when the binary was built without CUDA, when the module cannot be
/// loaded (each place tried, with the loader's reason: a missing CUDA library, say), or when no
/// CUDA GPU is visible (the message gives what cudaGetDeviceCount returned); DeviceError when the
/// GPU is visible but cannot be set up (cuBLAS handle, stream). Thread safety: reentrant.
[[nodiscard]] std::unique_ptr<Backend> make_backend(std::string_view device);

}  // namespace gradmesh::tasks

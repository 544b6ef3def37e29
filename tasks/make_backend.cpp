#include "tasks/make_backend.h"

#include <string>

#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"
#if GRADMESH_HAVE_CUDA
#include "tasks/cuda/cuda_backend.h"
#endif

namespace gradmesh::tasks {

bool cuda_built() noexcept { return GRADMESH_HAVE_CUDA != 0; }

std::unique_ptr<Backend> make_backend(std::string_view device) {
  if (device == "cpu") return std::make_unique<cpu::CpuBackend>();
  if (device == "cuda") {
#if GRADMESH_HAVE_CUDA
    return cuda::make_cuda_backend();
#else
    throw ConfigError(
        "compute.device = \"cuda\": this binary was built without CUDA (CMake found no CUDA "
        "toolkit with cuBLAS, or GRADMESH_WITH_CUDA was OFF); rebuild with the toolkit, or use "
        "\"cpu\"");
#endif
  }
  throw ConfigError("compute.device: expected \"cpu\" or \"cuda\", got \"" + std::string(device) +
                    "\"");
}

}  // namespace gradmesh::tasks

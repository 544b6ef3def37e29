#include "tasks/make_backend.h"

#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"
#if GRADMESH_HAVE_CUDA
#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <vector>

#include "tasks/cuda/cuda_backend.h"
#endif

namespace gradmesh::tasks {

#if GRADMESH_HAVE_CUDA
namespace {

constexpr const char* kModuleVariable = "GRADMESH_CUDA_MODULE";

/// Where the module may be, in order: $GRADMESH_CUDA_MODULE alone when set; else beside the
/// running program (<bin>/../lib/, the build tree's and an install's layout), the install prefix
/// CMake configured, the build tree, and the dynamic loader's search path.
std::vector<std::string> module_candidates() {
  if (const char* named = std::getenv(kModuleVariable); named != nullptr && *named != '\0')
    return {named};
  std::vector<std::string> candidates;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string file = std::filesystem::path(GRADMESH_CUDA_MODULE_BUILD).filename().string();
  if (!ec) candidates.push_back((self.parent_path().parent_path() / "lib" / file).string());
  for (const std::string& path :
       {std::string(GRADMESH_CUDA_MODULE_INSTALL), std::string(GRADMESH_CUDA_MODULE_BUILD), file}) {
    if (std::find(candidates.begin(), candidates.end(), path) == candidates.end())
      candidates.push_back(path);
  }
  return candidates;
}

/// Loads libgradmesh_cuda.so (tasks/cuda/cuda_backend.h) from the first candidate that loads, once
/// per path per process, and returns its entry point. A failed load is not remembered: the next
/// call tries again. Throws ConfigError listing every place tried and why each failed.
cuda::MakeBackendFn cuda_module() {
  static std::mutex mutex;
  static std::map<std::string, cuda::MakeBackendFn> loaded;  // path -> entry point
  const std::lock_guard lock(mutex);
  std::string tried;
  for (const std::string& path : module_candidates()) {
    if (const auto it = loaded.find(path); it != loaded.end()) return it->second;
    const bool bare = path.find('/') == std::string::npos;  // the loader's search path
    std::error_code ec;
    if (!bare && !std::filesystem::exists(path, ec)) {
      tried += "\n  " + path + ": no such file";
      continue;
    }
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why != nullptr ? why : "dlopen failed");
      continue;
    }
    void* entry = dlsym(module, cuda::kMakeBackendSymbol);
    if (entry == nullptr) {
      tried += "\n  " + path + ": no symbol " + cuda::kMakeBackendSymbol;
      dlclose(module);
      continue;
    }
    return loaded[path] = reinterpret_cast<cuda::MakeBackendFn>(entry);
  }
  throw ConfigError(
      "compute.device = \"cuda\": could not load the CUDA backend module (it needs the CUDA "
      "runtime and cuBLAS libraries; set " +
      std::string(kModuleVariable) + " to its path if it moved). Tried:" + tried);
}

}  // namespace
#endif

bool cuda_built() noexcept { return GRADMESH_HAVE_CUDA != 0; }

std::unique_ptr<Backend> make_backend(std::string_view device) {
  if (device == "cpu") return std::make_unique<cpu::CpuBackend>();
  if (device == "cuda") {
#if GRADMESH_HAVE_CUDA
    return std::unique_ptr<Backend>(cuda_module()());
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

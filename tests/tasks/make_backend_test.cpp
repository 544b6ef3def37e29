#include "tasks/make_backend.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/error.h"
#include "tasks/model.h"

namespace gradmesh::tasks {

TEST_CASE("make_backend gives the CPU backend for \"cpu\" and rejects unknown devices",
          "[tasks][backend]") {
  const auto cpu = make_backend("cpu");
  CHECK(cpu->name() == "cpu");
  CHECK(cpu->host_addressable());
  CHECK_THROWS_AS(make_backend("gpu"), ConfigError);
  CHECK_THROWS_WITH(make_backend("gpu"), Catch::Contains("compute.device") &&
                                             Catch::Contains("\"cpu\" or \"cuda\"") &&
                                             Catch::Contains("\"gpu\""));
}

TEST_CASE("compute.device = cuda without CUDA or without a GPU is a clear ConfigError",
          "[tasks][backend][cuda]") {
#if GRADMESH_HAVE_CUDA
  // Through the module (libgradmesh_cuda.so, loaded by make_backend), as a node gets it.
  REQUIRE(cuda_built());
  std::unique_ptr<Backend> be;
  try {
    be = make_backend("cuda");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("compute.device = \"cuda\"") &&
                             Catch::Contains("no CUDA GPU visible") &&
                             Catch::Contains("cudaGetDeviceCount"));
    return;
  }
  WARN("a CUDA GPU is visible: the no-GPU error cannot be provoked");
  CHECK(be->name() == "cuda");
  CHECK_FALSE(be->host_addressable());
#else
  REQUIRE_FALSE(cuda_built());
  CHECK_THROWS_AS(make_backend("cuda"), ConfigError);
  CHECK_THROWS_WITH(make_backend("cuda"), Catch::Contains("built without CUDA"));
#endif
}

#if GRADMESH_HAVE_CUDA
TEST_CASE("a CUDA module that cannot be loaded is a ConfigError naming where it was looked for",
          "[tasks][backend][cuda]") {
  const std::string missing = std::string(GRADMESH_BINARY_DIR) + "/no-such-dir/libgradmesh_cuda.so";
  REQUIRE(setenv("GRADMESH_CUDA_MODULE", missing.c_str(), 1) == 0);
  CHECK_THROWS_AS(make_backend("cuda"), ConfigError);
  CHECK_THROWS_WITH(make_backend("cuda"),
                    Catch::Contains("could not load the CUDA backend module") &&
                        Catch::Contains(missing + ": no such file") &&
                        Catch::Contains("GRADMESH_CUDA_MODULE"));
  unsetenv("GRADMESH_CUDA_MODULE");
}
#endif

}  // namespace gradmesh::tasks

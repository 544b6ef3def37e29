#include "tasks/make_backend.h"

#include <catch2/catch.hpp>
#include <string>

#include "engine/error.h"
#include "tasks/model.h"
#if GRADMESH_HAVE_CUDA
#include "tasks/cuda/cuda_backend.h"
#endif

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
  REQUIRE(cuda_built());
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count > 0) {
    WARN("a CUDA GPU is visible (" << probe.count << "): the no-GPU error cannot be provoked");
    const auto be = make_backend("cuda");
    CHECK(be->name() == "cuda");
    CHECK_FALSE(be->host_addressable());
    return;
  }
  CHECK_THROWS_AS(make_backend("cuda"), ConfigError);
  CHECK_THROWS_WITH(make_backend("cuda"), Catch::Contains("compute.device = \"cuda\"") &&
                                              Catch::Contains("no CUDA GPU visible") &&
                                              Catch::Contains("cudaGetDeviceCount"));
#else
  REQUIRE_FALSE(cuda_built());
  CHECK_THROWS_AS(make_backend("cuda"), ConfigError);
  CHECK_THROWS_WITH(make_backend("cuda"), Catch::Contains("built without CUDA"));
#endif
}

}  // namespace gradmesh::tasks

// The CPU backend's kernels split samples, channels and planes across set_threads()' arena; each
// item is computed whole by one thread in the serial order, so any thread count gives the same
// bits (tasks/cpu/cpu_backend.h). Sizes are above the split threshold, so 2 threads do split.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks::cpu {
namespace {

using testing::random_floats;

/// Every parallelized kernel's outputs, concatenated, on one batch of 16-channel 28x28 planes.
std::vector<float> run_kernels() {
  CpuBackend be;
  constexpr std::size_t samples = 8, channels = 16, side = 28, spatial = side * side;
  const std::size_t n = samples * channels * spatial;
  const std::vector<float> x = random_floats(n, 1), dy = random_floats(n, 2);
  std::vector<float> all;
  const auto keep = [&all](const std::vector<float>& v) {
    all.insert(all.end(), v.begin(), v.end());
  };

  const Im2colGeometry g{channels, side, side, 3, 1, 1, side, side};
  const std::size_t ld = samples * g.positions();
  std::vector<float> col(g.patch() * ld), dx(n);
  be.im2col(x.data(), samples, g, col.data(), ld);
  keep(col);
  be.col2im(col.data(), ld, samples, g, dx.data());
  keep(dx);
  const Im2colGeometry strided{channels, side, side, 3, 2, 1, 14, 14};
  std::vector<float> col2(strided.patch() * samples * strided.positions());
  be.im2col(x.data(), samples, strided, col2.data(), samples * strided.positions());
  be.col2im(col2.data(), samples * strided.positions(), samples, strided, dx.data());
  keep(dx);

  std::vector<float> packed(channels * ld), bias_sums(channels, 0.5f), y(n);
  be.pack_channels(dy.data(), samples, channels, spatial, packed.data(), ld, bias_sums.data());
  keep(packed);
  keep(bias_sums);
  be.unpack_channels_add_bias(packed.data(), ld, samples, channels, spatial, bias_sums.data(),
                              y.data());
  keep(y);

  be.relu_forward(x.data(), n, y.data());
  keep(y);
  be.relu_backward(x.data(), dy.data(), n, dx.data());
  keep(dx);

  std::vector<float> mean(channels), var(channels), inv_std(channels), gamma(channels, 1.5f),
      beta(channels, -0.25f), dgamma(channels), dbeta(channels);
  be.batch_norm_statistics(x.data(), samples, channels, spatial, mean.data(), var.data());
  keep(mean);
  keep(var);
  be.batch_norm_update(mean.data(), var.data(), channels, 0.1f, 1.0f, 1e-5f, nullptr, nullptr,
                       inv_std.data());
  be.batch_norm_forward(x.data(), samples, channels, spatial, mean.data(), inv_std.data(),
                        gamma.data(), beta.data(), y.data());
  keep(y);
  be.batch_norm_backward(x.data(), dy.data(), samples, channels, spatial, mean.data(),
                         inv_std.data(), gamma.data(), dx.data(), dgamma.data(), dbeta.data());
  keep(dx);
  keep(dgamma);
  keep(dbeta);

  const PoolGeometry pool{side, side, 2, 2, side / 2, side / 2};
  const std::size_t planes = samples * channels, pooled = planes * pool.out_height * pool.out_width;
  std::vector<float> py(pooled), pdy = random_floats(pooled, 3);
  std::vector<std::uint32_t> argmax(pooled);
  be.max_pool_forward(x.data(), planes, pool, py.data(), argmax.data());
  keep(py);
  be.max_pool_backward(pdy.data(), argmax.data(), planes, pool, dx.data());
  keep(dx);
  be.avg_pool_forward(x.data(), planes, pool, py.data());
  keep(py);
  be.avg_pool_backward(pdy.data(), planes, pool, dx.data());
  keep(dx);
  return all;
}

TEST_CASE("CpuBackend kernels give the same bits on 1, 2 and 3 threads", "[tasks][cpu][backend]") {
  set_threads(1);
  const std::vector<float> serial = run_kernels();
  for (const int count : {2, 3}) {
    INFO("threads " << count);
    set_threads(count);
    REQUIRE(threads() == count);
    const std::vector<float> parallel = run_kernels();
    set_threads(1);
    REQUIRE(parallel.size() == serial.size());
    CHECK(std::memcmp(parallel.data(), serial.data(), serial.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("set_threads rejects a count below 1", "[tasks][cpu][backend]") {
  CHECK_THROWS_AS(set_threads(0), ConfigError);
  CHECK(threads() == 1);  // unchanged by the refused call
  CHECK_THROWS_WITH(set_threads(-1), Catch::Contains("expected >= 1, got -1"));
}

}  // namespace
}  // namespace gradmesh::tasks::cpu

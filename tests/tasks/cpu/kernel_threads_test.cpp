// The CPU backend's kernels split samples, channels and planes across set_threads()' arena; each
// item is computed whole by one thread in the serial order, so any thread count gives the same
// bits (tasks/cpu/cpu_backend.h). Sizes are above the split threshold, so 2 threads do split.

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/blas.h"
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

TEST_CASE("CpuBackend run_chunks runs every item once, on distinct slots, with 1-thread BLAS",
          "[tasks][cpu][backend]") {
  constexpr std::size_t items = 64;
  for (const int count : {1, 2, 3}) {
    INFO("threads " << count);
    set_threads(count);
    CpuBackend be;
    REQUIRE(be.chunk_slots() == static_cast<std::size_t>(count));
    std::vector<std::atomic<int>> runs(items);
    std::vector<std::atomic<bool>> busy(be.chunk_slots());
    std::atomic<bool> clash = false, bad_slot = false, multi_threaded_blas = false;
    std::atomic<int> nested = 0;
    auto body = [&](std::size_t item, std::size_t slot) {
      if (slot >= busy.size()) {
        bad_slot = true;
        return;
      }
      if (busy[slot].exchange(true)) clash = true;  // another body holds this slot now
      ++runs[item];
      if (count > 1 && blas_threads() != 1) multi_threaded_blas = true;
      // A nested run runs inline, on this body's slot.
      auto inner = [&](std::size_t, std::size_t inner_slot) {
        if (inner_slot == 0) ++nested;
      };
      be.run_chunks(2, be.chunk_slots(), inner);
      // Some work, so that bodies overlap when the arena has threads.
      volatile float sink = 0.0f;
      for (int i = 0; i < 20000; ++i) sink = sink + static_cast<float>(i);
      busy[slot] = false;
    };
    be.run_chunks(items, be.chunk_slots(), body);
    CHECK_FALSE(bad_slot);
    CHECK_FALSE(clash);
    CHECK_FALSE(multi_threaded_blas);
    CHECK(nested == 2 * static_cast<int>(items));
    for (std::size_t i = 0; i < items; ++i) CHECK(runs[i] == 1);
    CHECK(blas_threads() == count);  // restored
    // Fewer slots than threads: in order on the caller, slot 0.
    std::vector<std::size_t> order;
    auto serial = [&](std::size_t item, std::size_t slot) {
      CHECK(slot == 0);
      order.push_back(item);
    };
    be.run_chunks(5, 1, serial);
    CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4});
  }
  set_threads(1);
}

TEST_CASE("set_threads rejects a count below 1", "[tasks][cpu][backend]") {
  CHECK_THROWS_AS(set_threads(0), ConfigError);
  CHECK(threads() == 1);  // unchanged by the refused call
  CHECK_THROWS_WITH(set_threads(-1), Catch::Contains("expected >= 1, got -1"));
}

}  // namespace
}  // namespace gradmesh::tasks::cpu

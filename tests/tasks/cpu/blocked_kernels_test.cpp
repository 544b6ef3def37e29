// The CPU backend's kernels on oneDNN's blocked layouts nChw16c and nChw8c
// (tasks/cpu/blocked_kernels.h) against its NCHW kernels: batch normalization bit for bit, global
// average pooling within rounding.

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "tasks/cpu/blocked_kernels.h"
#include "tasks/cpu/cpu_backend.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks::cpu {
namespace {

/// x (samples x channels x spatial, NCHW) in nChw{block}c.
std::vector<float> to_blocked(const std::vector<float>& x, std::size_t block, std::size_t samples,
                              std::size_t channels, std::size_t spatial) {
  std::vector<float> out(x.size());
  for (std::size_t n = 0; n < samples; ++n) {
    for (std::size_t c = 0; c < channels; ++c) {
      for (std::size_t p = 0; p < spatial; ++p) {
        out[((n * channels / block + c / block) * spatial + p) * block + c % block] =
            x[(n * channels + c) * spatial + p];
      }
    }
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE(
    "Batch normalization on nChw16c and nChw8c gives the NCHW kernels' bits, on 1 and 2 "
    "threads",
    "[tasks][cpu][blocked]") {
  CpuBackend be;
  for (const std::size_t block : {std::size_t{8}, std::size_t{16}})
    for (const int threads : {1, 2}) {
      set_threads(threads);
      // The ResNet's shapes (16 channels at 28x28, 64 at 7x7) and a batch of 5.
      for (const auto [samples, channels, spatial] :
           {std::array<std::size_t, 3>{5, 16, 784}, {3, 64, 49}, {2, 32, 1}}) {
        INFO("block " << block << ", threads " << threads << ", " << samples << " x " << channels
                      << " x " << spatial);
        const std::size_t size = samples * channels * spatial;
        const auto x = testing::random_floats(size, 3, -2.0f, 3.0f);
        const auto dy = testing::random_floats(size, 4);
        const auto gamma = testing::random_floats(channels, 5, 0.5f, 1.5f);
        const auto beta = testing::random_floats(channels, 6);
        std::vector<float> mean(channels), var(channels), mean_b(channels), var_b(channels),
            inv_std(channels);
        be.batch_norm_statistics(x.data(), samples, channels, spatial, mean.data(), var.data());
        const auto xb = to_blocked(x, block, samples, channels, spatial);
        batch_norm_statistics_blocked(block, xb.data(), samples, channels, spatial, mean_b.data(),
                                      var_b.data());
        CHECK(same_bits(mean, mean_b));
        CHECK(same_bits(var, var_b));
        be.batch_norm_update(mean.data(), var.data(), channels, 0.1f, 1.0f, 1e-5f, nullptr, nullptr,
                             inv_std.data());
        std::vector<float> y(size), yb(size);
        be.batch_norm_forward(x.data(), samples, channels, spatial, mean.data(), inv_std.data(),
                              gamma.data(), beta.data(), y.data());
        batch_norm_forward_blocked(block, xb.data(), samples, channels, spatial, mean.data(),
                                   inv_std.data(), gamma.data(), beta.data(), yb.data());
        CHECK(same_bits(to_blocked(y, block, samples, channels, spatial), yb));
        std::vector<float> dx(size), dxb(size), dgamma(channels), dbeta(channels),
            dgamma_b(channels), dbeta_b(channels);
        be.batch_norm_backward(x.data(), dy.data(), samples, channels, spatial, mean.data(),
                               inv_std.data(), gamma.data(), dx.data(), dgamma.data(),
                               dbeta.data());
        batch_norm_backward_blocked(block, xb.data(),
                                    to_blocked(dy, block, samples, channels, spatial).data(),
                                    samples, channels, spatial, mean.data(), inv_std.data(),
                                    gamma.data(), dxb.data(), dgamma_b.data(), dbeta_b.data());
        CHECK(same_bits(dgamma, dgamma_b));
        CHECK(same_bits(dbeta, dbeta_b));
        CHECK(same_bits(to_blocked(dx, block, samples, channels, spatial), dxb));
      }
    }
  set_threads(1);
}

TEST_CASE(
    "Global average pooling on nChw16c and nChw8c gives the channel means and spreads dy "
    "back",
    "[tasks][cpu][blocked]") {
  constexpr std::size_t samples = 3, channels = 32, spatial = 49;
  for (const std::size_t block : {std::size_t{8}, std::size_t{16}}) {
    INFO("block " << block);
    const auto x = testing::random_floats(samples * channels * spatial, 7);
    std::vector<float> y(samples * channels);
    global_avg_pool_forward_blocked(block, to_blocked(x, block, samples, channels, spatial).data(),
                                    samples, channels, spatial, y.data());
    for (std::size_t n = 0; n < samples; ++n) {
      for (std::size_t c = 0; c < channels; ++c) {
        double sum = 0;
        for (std::size_t p = 0; p < spatial; ++p) sum += x[(n * channels + c) * spatial + p];
        CHECK(y[n * channels + c] == Approx(sum / spatial).margin(1e-6));
      }
    }
    const auto dy = testing::random_floats(samples * channels, 8);
    std::vector<float> dx(x.size()), expected(x.size());
    global_avg_pool_backward_blocked(block, dy.data(), samples, channels, spatial, dx.data());
    for (std::size_t n = 0; n < samples; ++n) {
      for (std::size_t c = 0; c < channels; ++c) {
        for (std::size_t p = 0; p < spatial; ++p) {
          expected[(n * channels + c) * spatial + p] =
              dy[n * channels + c] * (1.0f / static_cast<float>(spatial));
        }
      }
    }
    CHECK(same_bits(to_blocked(expected, block, samples, channels, spatial), dx));
  }
}

TEST_CASE("A block other than 8 or 16 is refused", "[tasks][cpu][blocked]") {
  std::vector<float> x(4 * 4), y(4);
  CHECK_THROWS_AS(global_avg_pool_forward_blocked(4, x.data(), 1, 4, 4, y.data()), ContractError);
}

}  // namespace gradmesh::tasks::cpu

#include "tasks/cpu/cpu_backend.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tasks/cpu/blas.h"
#include "tasks/optim/sgd.h"
#include "tasks/random.h"

namespace gradmesh::tasks::cpu {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = 2.0f * rng.next_float() - 1.0f;
  return v;
}

Im2colGeometry geometry(std::size_t c, std::size_t h, std::size_t w, std::size_t k, std::size_t s,
                        std::size_t p) {
  return {c, h, w, k, s, p, (h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1};
}

// The receptive-field element im2col documents, read straight from x (0 in the padding).
float direct(const std::vector<float>& x, std::size_t sample, const Im2colGeometry& g,
             std::size_t row, std::size_t position) {
  const std::size_t v = row % g.kernel, u = row / g.kernel % g.kernel;
  const std::size_t c = row / (g.kernel * g.kernel);
  const std::size_t i = position / g.out_width, j = position % g.out_width;
  const auto h = static_cast<long>(i * g.stride + u) - static_cast<long>(g.padding);
  const auto w = static_cast<long>(j * g.stride + v) - static_cast<long>(g.padding);
  if (h < 0 || w < 0 || h >= static_cast<long>(g.height) || w >= static_cast<long>(g.width)) {
    return 0.0f;
  }
  return x[sample * g.sample_size() + (c * g.height + static_cast<std::size_t>(h)) * g.width +
           static_cast<std::size_t>(w)];
}

}  // namespace

// im2col against the direct read, and col2im as its adjoint, for one geometry.
void check_im2col(const Im2colGeometry& g, std::size_t samples, std::uint64_t seed) {
  CpuBackend be;
  INFO("C " << g.channels << " H " << g.height << " W " << g.width << " k " << g.kernel << " s "
            << g.stride << " p " << g.padding);
  const std::vector<float> x = random_floats(samples * g.sample_size(), 100 + seed);
  const std::size_t ld = samples * g.positions() + 3;  // a row stride wider than the columns
  std::vector<float> col(g.patch() * ld, 99.0f);
  be.im2col(x.data(), samples, g, col.data(), ld);
  for (std::size_t s2 = 0; s2 < samples; ++s2) {
    for (std::size_t r = 0; r < g.patch(); ++r) {
      for (std::size_t q = 0; q < g.positions(); ++q) {
        REQUIRE(col[r * ld + s2 * g.positions() + q] == direct(x, s2, g, r, q));
      }
    }
  }
  // col2im is im2col's adjoint: <im2col(x), d> == <x, col2im(d)>.
  const std::vector<float> d = random_floats(g.patch() * ld, 200 + seed);
  std::vector<float> dx(samples * g.sample_size(), 7.0f);
  be.col2im(d.data(), ld, samples, g, dx.data());
  double lhs = 0.0, rhs = 0.0;
  for (std::size_t r = 0; r < g.patch(); ++r) {
    for (std::size_t q = 0; q < samples * g.positions(); ++q) {
      lhs += static_cast<double>(col[r * ld + q]) * d[r * ld + q];
    }
  }
  for (std::size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * dx[i];
  CHECK(lhs == Approx(rhs).margin(1e-4));
}

TEST_CASE("CpuBackend im2col equals the direct receptive-field read on random geometries",
          "[tasks][cpu][backend]") {
  SplitMix64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t c = 1 + rng.next_below(3), h = 3 + rng.next_below(6),
                      w = 3 + rng.next_below(6);
    const std::size_t p = rng.next_below(3), s = 1 + rng.next_below(3);
    const std::size_t k = 1 + rng.next_below(std::min(h, w) + 2 * p);
    check_im2col(geometry(c, h, w, k, s, p), 1 + rng.next_below(3), trial);
  }
}

TEST_CASE("CpuBackend im2col with same padding (stride 1, k = 2p + 1: one copy a tap)",
          "[tasks][cpu][backend]") {
  std::uint64_t seed = 1000;
  for (std::size_t p = 0; p <= 2; ++p) {
    for (std::size_t h = 1; h <= 6; ++h) {
      for (std::size_t w = 1; w <= 6; ++w)
        check_im2col(geometry(2, h, w, 2 * p + 1, 1, p), 2, ++seed);
    }
  }
}

TEST_CASE("CpuBackend max pooling: first maximum wins ties, backward routes dy to the argmax",
          "[tasks][cpu][backend]") {
  CpuBackend be;
  // One 3x4 plane, 2x2 windows, stride 1 (overlapping): 2 x 3 outputs.
  const std::vector<float> x = {1, 5, 5, 0,  //
                                2, 5, 3, 4,  //
                                9, 0, 3, 4};
  const PoolGeometry g{3, 4, 2, 1, 2, 3};
  std::vector<float> y(6);
  std::vector<std::uint32_t> arg(6);
  be.max_pool_forward(x.data(), 1, g, y.data(), arg.data());
  CHECK(y == std::vector<float>{5, 5, 5, 9, 5, 4});
  CHECK(arg == std::vector<std::uint32_t>{1, 1, 2, 8, 5, 7});  // ties: row-major first
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  std::vector<float> dx(12, -1.0f);
  be.max_pool_backward(dy.data(), arg.data(), 1, g, dx.data());
  CHECK(dx == std::vector<float>{0, 3, 3, 0, 0, 5, 0, 6, 4, 0, 0, 0});
}

TEST_CASE("CpuBackend dropout masks are SplitMix64's stream, pack / unpack invert each other",
          "[tasks][cpu][backend]") {
  CpuBackend be;
  const std::vector<float> x = random_floats(1000, 3);
  std::vector<float> mask(1000), y(1000);
  be.dropout_forward(x.data(), x.size(), 77, 0.25f, 4.0f / 3.0f, mask.data(), y.data());
  SplitMix64 rng(77);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float m = rng.next_float() < 0.25f ? 0.0f : 4.0f / 3.0f;
    REQUIRE(mask[i] == m);
    REQUIRE(y[i] == x[i] * m);
  }

  // 3 samples x 2 filters x 5 positions <-> F x (3 * 5) with row stride 16.
  const std::vector<float> dy = random_floats(30, 4);
  std::vector<float> packed(2 * 16, 0.0f), sums = {1.0f, 2.0f};
  be.pack_channels(dy.data(), 3, 2, 5, packed.data(), 16, sums.data());
  std::vector<float> back(30);
  const std::vector<float> zero_bias = {0.0f, 0.0f};
  be.unpack_channels_add_bias(packed.data(), 16, 3, 2, 5, zero_bias.data(), back.data());
  CHECK(back == dy);
  for (std::size_t f = 0; f < 2; ++f) {
    double expected = f + 1.0;
    for (std::size_t s = 0; s < 3; ++s) {
      for (std::size_t i = 0; i < 5; ++i) expected += dy[(s * 2 + f) * 5 + i];
    }
    CHECK(sums[f] == Approx(expected).margin(1e-5));
  }
  std::vector<float> col_sums(5);
  be.column_sums(dy.data(), 6, 5, col_sums.data());
  for (std::size_t j = 0; j < 5; ++j) {
    float expected = 0.0f;
    for (std::size_t r = 0; r < 6; ++r) expected += dy[r * 5 + j];
    CHECK(col_sums[j] == expected);
  }
}

TEST_CASE("CpuBackend buffers are zero-filled host memory and move their ownership",
          "[tasks][cpu][backend]") {
  CpuBackend be;
  CHECK(be.host_addressable());
  Buffer<float> a = be.allocate<float>(100, MemoryKind::kHostStaging);
  REQUIRE(a.size() == 100);
  for (const float v : a.span()) CHECK(v == 0.0f);
  float* p = a.data();
  Buffer<float> b = std::move(a);
  CHECK(a.empty());
  CHECK(a.data() == nullptr);
  CHECK(b.data() == p);
  CHECK(be.allocate<std::uint32_t>(0).data() == nullptr);
}

TEST_CASE("CpuBackend sgd_step is Sgd::step bit for bit, velocity carried over three steps",
          "[tasks][cpu][backend][sgd]") {
  CpuBackend be;
  for (const SgdOptions o : {SgdOptions{0.1f, 0.9f, 0.0f}, SgdOptions{0.05f, 0.0f, 5e-4f},
                             SgdOptions{0.3f, 0.5f, 1e-2f}}) {
    INFO("lr " << o.lr << " momentum " << o.momentum << " weight decay " << o.weight_decay);
    std::vector<float> w = random_floats(1001, 1), v = random_floats(1001, 3);
    std::vector<float> w_sgd = w, v_sgd = v;
    const Sgd sgd(o);
    for (std::uint64_t step = 0; step < 3; ++step) {
      const std::vector<float> g = random_floats(w.size(), 10 + step);
      be.sgd_step(w.data(), g.data(), v.data(), w.size(), o);
      sgd.step(w_sgd, g, v_sgd);
    }
    CHECK(std::memcmp(w.data(), w_sgd.data(), w.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(v.data(), v_sgd.data(), v.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("CpuBackend scale multiplies in place", "[tasks][cpu][backend]") {
  CpuBackend be;
  std::vector<float> x = {1.0f, -2.0f, 0.5f, 3.0f};
  be.scale(x.data(), 3, 0.25f);
  CHECK(x == std::vector<float>{0.25f, -0.5f, 0.125f, 3.0f});  // the 4th is past n
}

TEST_CASE("oneDNN's convolutions and batch norms run JIT kernels in the layout this CPU prefers",
          "[tasks][cpu][backend][onednn]") {
  if (!onednn_built()) {
    CHECK(preferred_blocked_layout() == Layout::kNchw);
    return;
  }
  // oneDNN's avx512_core kernels take nChw16c; its avx2 and sse41 ones nChw8c. On an AVX2 host
  // nChw16c ran the batch norms on oneDNN's reference loops, 100x slower (2026-12-07).
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const std::string names = onednn_kernel_names();
  INFO(names);
  if (avx512) {
    CHECK(preferred_blocked_layout() == Layout::kBlocked16);
  } else if (__builtin_cpu_supports("avx2")) {
    CHECK(preferred_blocked_layout() == Layout::kBlocked8);
  }
  if (__builtin_cpu_supports("avx2")) {
    CHECK(names.find("ref") == std::string::npos);  // no reference loops
    CHECK(names.find("jit") != std::string::npos);
  }
  CHECK(CpuBackend().description().find(names) != std::string::npos);
}

}  // namespace gradmesh::tasks::cpu

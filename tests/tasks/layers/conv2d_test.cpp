#include "tasks/layers/conv2d.h"

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {
namespace {

struct Case {
  Shape input;
  Conv2dGeometry geometry;
  std::size_t batch;
};

/// y by the definition, in double: y[n,f,i,j] = b[f] + sum W[f,c,u,v] x[n,c,i s-p+u,j s-p+v].
std::vector<double> direct_convolution(const Case& t, const std::vector<float>& x,
                                       std::span<const float> params, Shape out) {
  const auto& g = t.geometry;
  const std::size_t c_in = t.input.channels, h = t.input.height, w = t.input.width;
  const std::size_t k = g.kernel;
  const float* weights = params.data();
  const float* bias = params.data() + g.filters * c_in * k * k;
  std::vector<double> y(t.batch * out.size());
  for (std::size_t n = 0; n < t.batch; ++n) {
    for (std::size_t f = 0; f < g.filters; ++f) {
      for (std::size_t i = 0; i < out.height; ++i) {
        for (std::size_t j = 0; j < out.width; ++j) {
          double sum = bias[f];
          for (std::size_t c = 0; c < c_in; ++c) {
            for (std::size_t u = 0; u < k; ++u) {
              for (std::size_t v = 0; v < k; ++v) {
                const auto hi = static_cast<std::ptrdiff_t>(i * g.stride + u) -
                                static_cast<std::ptrdiff_t>(g.padding);
                const auto wi = static_cast<std::ptrdiff_t>(j * g.stride + v) -
                                static_cast<std::ptrdiff_t>(g.padding);
                if (hi < 0 || wi < 0 || hi >= static_cast<std::ptrdiff_t>(h) ||
                    wi >= static_cast<std::ptrdiff_t>(w)) {
                  continue;
                }
                sum += static_cast<double>(weights[((f * c_in + c) * k + u) * k + v]) *
                       x[((n * c_in + c) * h + static_cast<std::size_t>(hi)) * w +
                         static_cast<std::size_t>(wi)];
              }
            }
          }
          y[((n * g.filters + f) * out.height + i) * out.width + j] = sum;
        }
      }
    }
  }
  return y;
}

}  // namespace

TEST_CASE("Conv2d output shapes, parameter layout and errors", "[tasks][conv2d]") {
  CHECK(Conv2d::output_shape_for({1, 28, 28}, {32, 5, 1, 2}) == Shape{32, 28, 28});
  CHECK(Conv2d::output_shape_for({1, 28, 28}, {32, 5, 1, 0}) == Shape{32, 24, 24});
  CHECK(Conv2d::output_shape_for({3, 7, 6}, {4, 3, 2, 1}) == Shape{4, 4, 3});
  CHECK(Conv2d::output_shape_for({2, 2, 2}, {1, 4, 1, 1}) == Shape{1, 1, 1});
  CHECK_THROWS_WITH(Conv2d::output_shape_for({1, 3, 3}, {8, 5, 1, 0}),
                    "conv2d: expected a kernel no larger than the padded input 3x3 (input 1x3x3, "
                    "padding 0), got 5x5");
  CHECK_THROWS_AS(Conv2d({1, 4, 4}, {0, 3, 1, 0}), ConfigError);
  CHECK_THROWS_AS(Conv2d({1, 4, 4}, {2, 3, 0, 0}), ConfigError);
  CHECK_THROWS_AS(Conv2d({0, 4, 4}, {2, 3, 1, 0}), ConfigError);

  Conv2d conv({3, 8, 8}, {4, 3, 1, 1});
  CHECK(conv.kind() == "conv2d");
  CHECK_FALSE(conv.has_sufficient_factors());  // Poseidon ATC'17 sec. 3.2
  CHECK(conv.parameter_count() == 4 * 3 * 3 * 3 + 4);
  CHECK(conv.output_shape() == Shape{4, 8, 8});
  CHECK(conv.forward_flops() == (2.0 * 27 + 1) * 4 * 64);
  std::vector<float> p(conv.parameter_count()), g(conv.parameter_count());
  conv.bind(p, g);
  CHECK(conv.weights().data() == p.data());
  CHECK(conv.bias().data() == p.data() + 4 * 27);
  conv.initialize(5);
  const float a = std::sqrt(6.0f / (27 + 36));
  for (const float w : conv.weights()) CHECK(std::abs(w) <= a);
  for (const float b : conv.bias()) CHECK(b == 0.0f);
  std::vector<float> short_p(p.size() - 1);
  CHECK_THROWS_AS(conv.bind(short_p, g), ContractError);
}

TEST_CASE("Conv2d forward equals a direct convolution on random shapes, strides and paddings",
          "[tasks][conv2d]") {
  SplitMix64 rng(2024);
  const auto pick = [&rng](std::size_t lo, std::size_t hi) {
    return lo + static_cast<std::size_t>(rng.next_below(hi - lo + 1));
  };
  for (const cpu::CpuKernels kernels : testing::kernel_sets()) {
    const testing::ScopedKernels use(kernels);
    for (int trial = 0; trial < 40; ++trial) {
      Case t;
      t.geometry = {pick(1, 5), pick(1, 5), pick(1, 3), pick(0, 2)};
      const std::size_t least = t.geometry.kernel > 2 * t.geometry.padding
                                    ? t.geometry.kernel - 2 * t.geometry.padding
                                    : 1;
      t.input = {pick(1, 4), pick(least, 11), pick(least, 11)};
      t.batch = pick(1, 3);
      INFO(cpu::to_string(kernels)
           << " trial " << trial << ": input " << to_string(t.input) << ", filters "
           << t.geometry.filters << ", kernel " << t.geometry.kernel << ", stride "
           << t.geometry.stride << ", padding " << t.geometry.padding << ", batch " << t.batch);
      // Several samples per GEMM (the default budget), one, or two (the last chunk may be short).
      const Shape out = Conv2d::output_shape_for(t.input, t.geometry);
      const std::size_t columns =
          t.input.channels * t.geometry.kernel * t.geometry.kernel * out.height * out.width;
      const std::size_t budget =
          std::array<std::size_t, 3>{Conv2d::kColumnBudget, 1, 2 * columns}[trial % 3];
      Conv2d conv(t.input, t.geometry, budget);
      std::vector<float> params(conv.parameter_count()), grads(conv.parameter_count());
      conv.bind(params, grads);
      conv.reserve(t.batch);
      const std::size_t chunk = std::array<std::size_t, 3>{t.batch, 1, 2}[trial % 3];
      const bool builtin = kernels == cpu::CpuKernels::kBuiltin;
      CHECK(conv.samples_per_gemm() == (builtin ? std::min(t.batch, chunk) : t.batch));
      conv.initialize(static_cast<std::uint64_t>(trial));
      for (float& b : conv.bias()) b = 0.5f * (rng.next_float() - 0.5f);  // non-zero bias
      const auto x = testing::random_floats(t.batch * t.input.size(), 300 + trial);
      std::vector<float> y(t.batch * conv.output_size());
      conv.forward(x.data(), y.data(), t.batch);
      const auto expected = direct_convolution(t, x, params, conv.output_shape());
      double scale = 1.0, worst = 0.0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        scale = std::max(scale, std::abs(expected[i]));
        worst = std::max(worst, std::abs(y[i] - expected[i]));
      }
      CHECK(worst <= 1e-4 * scale);
    }
  }
}

// Tolerance: gradient_check.h's (relative 1e-2, absolute 1e-3), with a step of 1e-2 rather than
// 1e-3. The objective sum(y .* r) is bilinear in (W, x), so central differences have no
// truncation error at any step, and the larger step divides the float rounding noise by 10.
TEST_CASE("Conv2d parameter and input gradients match finite differences", "[tasks][conv2d]") {
  const std::vector<Case> cases = {
      {{2, 5, 5}, {3, 3, 1, 0}, 2},  // plain
      {{2, 6, 5}, {2, 3, 2, 1}, 2},  // stride 2, padding 1, odd width
      {{1, 4, 4}, {2, 2, 1, 2}, 1},  // padding larger than half the kernel
      {{3, 7, 7}, {2, 4, 3, 1}, 3},  // stride 3 skips input pixels
  };
  for (const cpu::CpuKernels kernels : testing::kernel_sets()) {
    const testing::ScopedKernels use(kernels);
    for (const Case& t : cases) {
      for (const std::size_t budget : {Conv2d::kColumnBudget, std::size_t{1}}) {
        INFO(cpu::to_string(kernels)
             << " input " << to_string(t.input) << ", kernel " << t.geometry.kernel << ", stride "
             << t.geometry.stride << ", padding " << t.geometry.padding << ", budget " << budget);
        Conv2d conv(t.input, t.geometry, budget);  // all samples in one GEMM, or one at a time
        testing::LayerHarness h(conv, t.batch, 17);
        for (float& b : conv.bias()) b = 0.1f;
        h.check(1e-2f);
      }
    }
  }
}

TEST_CASE("Conv2d backward overwrites its gradients, may skip dx or the parameter gradients",
          "[tasks][conv2d]") {
  for (const cpu::CpuKernels kernels : testing::kernel_sets()) {
    INFO(cpu::to_string(kernels));
    const testing::ScopedKernels use(kernels);
    Conv2d conv({2, 5, 5}, {3, 3, 1, 1}, 2 * 18 * 25);  // 2 samples per GEMM: chunks of 2 and 1
    testing::LayerHarness h(conv, 3, 8);
    CHECK(conv.samples_per_gemm() == (kernels == cpu::CpuKernels::kBuiltin ? 2 : 3));
    h.backward();
    const std::vector<float> once = h.grads, dx = h.dx;
    h.backward();
    CHECK(h.grads == once);  // overwritten, not accumulated
    conv.backward(h.x.data(), h.y.data(), h.r.data(), nullptr, 3);
    CHECK(h.grads == once);
    // db is the sum of dY over samples and positions.
    for (std::size_t f = 0; f < 3; ++f) {
      double s = 0.0;
      for (std::size_t n = 0; n < 3; ++n) {
        for (std::size_t i = 0; i < 25; ++i) s += h.r[(n * 3 + f) * 25 + i];
      }
      CHECK(h.grads[3 * 18 + f] == Approx(s).margin(1e-5));
    }
    conv.set_parameter_gradients_enabled(false);
    std::fill(h.grads.begin(), h.grads.end(), -7.0f);
    std::vector<float> dx2(dx.size());
    conv.backward(h.x.data(), h.y.data(), h.r.data(), dx2.data(), 3);
    CHECK(dx2 == dx);
    CHECK(std::all_of(h.grads.begin(), h.grads.end(), [](float v) { return v == -7.0f; }));
  }
}

TEST_CASE("Conv2d gives the same bits on 1, 2 and 3 threads, its chunks side by side",
          "[tasks][conv2d]") {
  const testing::ScopedKernels builtin(cpu::CpuKernels::kBuiltin);  // the chunks are its own
  // 2 samples per GEMM over a batch of 11: 6 chunks, 4 groups of backward's sums (2 1 2 1).
  const Shape input{3, 9, 9};
  const Conv2dGeometry geometry{4, 3, 1, 1};
  constexpr std::size_t batch = 11;
  const auto run = [&](int threads) {
    cpu::set_threads(threads);
    Conv2d conv(input, geometry, 2 * 27 * 81);
    testing::LayerHarness h(conv, batch, 21);
    REQUIRE(conv.samples_per_gemm() == 2);
    REQUIRE(conv.gradient_groups(batch) == 4);
    for (float& b : conv.bias()) b = 0.25f;
    h.backward();  // forward, then backward
    std::vector<float> all = h.y;
    all.insert(all.end(), h.grads.begin(), h.grads.end());
    all.insert(all.end(), h.dx.begin(), h.dx.end());
    cpu::set_threads(1);
    return all;
  };
  const std::vector<float> serial = run(1);
  for (const int threads : {2, 3}) {
    INFO("threads " << threads);
    const std::vector<float> parallel = run(threads);
    REQUIRE(parallel.size() == serial.size());
    CHECK(std::memcmp(parallel.data(), serial.data(), serial.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("Conv2d sums backward's chunks in groups whose dW sums fit the column budget",
          "[tasks][conv2d]") {
  const testing::ScopedKernels builtin(cpu::CpuKernels::kBuiltin);
  // 8 x 18 = 144 floats of dW; a budget of 2 samples' columns (2 x 18 x 25 floats).
  Conv2d small({2, 5, 5}, {8, 3, 1, 1}, 2 * 18 * 25);
  CHECK(small.gradient_groups(3) == 0);  // before reserve
  std::vector<float> params(small.parameter_count()), grads(small.parameter_count());
  small.bind(params, grads);
  small.reserve(16);
  CHECK(small.gradient_groups(16) == 4);  // 8 chunks
  CHECK(small.gradient_groups(5) == 3);   // 3 chunks
  CHECK(small.gradient_groups(1) == 1);
  // 64 x 4 x 9 = 2304 floats of dW against a budget of 1 sample's 36 x 16 columns: one group.
  Conv2d wide({4, 4, 4}, {64, 3, 1, 1}, 36 * 16);
  std::vector<float> wparams(wide.parameter_count()), wgrads(wide.parameter_count());
  wide.bind(wparams, wgrads);
  wide.reserve(8);
  CHECK(wide.samples_per_gemm() == 1);
  CHECK(wide.gradient_groups(8) == 1);
  // A batch above reserve's would need more groups' sums than were sized: refused.
  std::vector<float> x(9 * 64), y(9 * wide.output_size()), dx(x.size());
  CHECK_THROWS_AS(wide.forward(x.data(), y.data(), 9), ContractError);
  CHECK_THROWS_AS(wide.backward(x.data(), y.data(), y.data(), dx.data(), 9), ContractError);
}

TEST_CASE("Conv2d on oneDNN matches the builtin kernels on the configs' shapes and odd ones",
          "[tasks][conv2d][onednn]") {
  if (!cpu::onednn_built()) return;  // built without oneDNN: nothing to compare
  // The ResNet's (configs/fashion-mnist-resnet.toml: the 1-channel stem, 3x3 at 28x28, 14x14 and
  // 7x7, stride 2 and its 1x1 projections), the CNN's 5x5 with padding 2, and odd ones: padding
  // 0 to 2, an odd map, 3 filters, a batch not a multiple of 16 nor of the vector width.
  const std::vector<Case> cases = {
      {{1, 28, 28}, {16, 3, 1, 1}, 8},  {{16, 28, 28}, {16, 3, 1, 1}, 8},
      {{16, 28, 28}, {32, 3, 2, 1}, 8}, {{16, 28, 28}, {32, 1, 2, 0}, 8},
      {{32, 14, 14}, {32, 3, 1, 1}, 8}, {{32, 14, 14}, {64, 1, 2, 0}, 8},
      {{64, 7, 7}, {64, 3, 1, 1}, 8},   {{1, 28, 28}, {32, 5, 1, 2}, 5},
      {{32, 14, 14}, {64, 5, 1, 2}, 5}, {{3, 9, 7}, {3, 3, 2, 0}, 3},
      {{5, 7, 7}, {17, 2, 1, 2}, 7},    {{24, 7, 7}, {40, 3, 3, 1}, 3},
  };
  // On 2 and 3 threads oneDNN runs each call as batch slices side by side (tasks/cpu/
  // onednn_convolution.h), 3 threads in slices of unequal sizes; builtin's bits do not depend on
  // the thread count.
  const int threads = GENERATE(1, 2, 3);
  cpu::set_threads(threads);
  for (const Case& t : cases) {
    INFO("threads " << threads << ", input " << to_string(t.input) << ", filters "
                    << t.geometry.filters << ", kernel " << t.geometry.kernel << ", stride "
                    << t.geometry.stride << ", padding " << t.geometry.padding << ", batch "
                    << t.batch);
    // Both sets on the same parameters, input and output gradient.
    const auto run = [&](cpu::CpuKernels kernels) {
      const testing::ScopedKernels use(kernels);
      Conv2d conv(t.input, t.geometry);
      testing::LayerHarness h(conv, t.batch, 5);
      for (std::size_t f = 0; f < t.geometry.filters; ++f) {
        conv.bias()[f] = 0.01f * static_cast<float>(f);
      }
      h.backward();
      return std::array<std::vector<float>, 3>{h.y, h.grads, h.dx};
    };
    const auto builtin = run(cpu::CpuKernels::kBuiltin);
    const auto onednn = run(cpu::CpuKernels::kOnednn);
    // Float sums of up to C k k (forward), batch OH OW (dW) or F k k (dx) products in another
    // order: relative to the largest magnitude of each, within 1e-5 (measured: below 2e-6).
    const char* names[] = {"y", "parameter gradients", "dx"};
    for (std::size_t a = 0; a < 3; ++a) {
      INFO(names[a]);
      REQUIRE(builtin[a].size() == onednn[a].size());
      double scale = 0.0, worst = 0.0;
      for (std::size_t i = 0; i < builtin[a].size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(builtin[a][i])));
        worst = std::max(worst, static_cast<double>(std::abs(builtin[a][i] - onednn[a][i])));
      }
      CHECK(worst <= 1e-5 * scale);
    }
  }
  cpu::set_threads(1);
}

TEST_CASE("Conv2d on oneDNN gives the same bits from run to run on 2 threads",
          "[tasks][conv2d][onednn]") {
  if (!cpu::onednn_built()) return;  // built without oneDNN: nothing to compare
  const testing::ScopedKernels use(cpu::CpuKernels::kOnednn);
  cpu::set_threads(2);
  const auto run = [] {
    Conv2d conv({16, 14, 14}, {32, 3, 1, 1});
    testing::LayerHarness h(conv, 32, 9);
    h.backward();
    std::vector<float> all = h.y;
    all.insert(all.end(), h.grads.begin(), h.grads.end());
    all.insert(all.end(), h.dx.begin(), h.dx.end());
    return all;
  };
  const std::vector<float> first = run();
  for (int again = 0; again < 3; ++again) {
    const std::vector<float> next = run();
    REQUIRE(next.size() == first.size());
    CHECK(std::memcmp(next.data(), first.data(), first.size() * sizeof(float)) == 0);
  }
  cpu::set_threads(1);
}

}  // namespace gradmesh::tasks

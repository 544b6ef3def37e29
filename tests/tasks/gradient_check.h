#pragma once
// Finite-difference helpers shared by the tasks/ gradient tests.
//
// Tolerance: the layers compute in float, so a perturbed loss carries rounding noise of about
// 1e-7 * |loss| * sqrt(terms). With central differences and eps = 1e-3 that is ~1e-4 absolute in
// the numerical derivative, and the truncation error is O(eps^2 * f''') ~ 1e-6 for these smooth
// (or piecewise linear) functions. A relative tolerance of 1e-2 plus an absolute floor of 1e-3
// therefore separates a correct gradient from a wrong one (a wrong sign or a missing term is off
// by O(1) relative) without flaking on rounding.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/layers/gradient_check.h"
#include "tasks/layers/layer.h"
#include "tasks/random.h"

namespace gradmesh::tasks::testing {

/// Sets the CPU kernel set while it lives (cpu::set_kernels is process-wide), then restores the
/// one before.
class ScopedKernels {
 public:
  explicit ScopedKernels(cpu::CpuKernels k) : before_(cpu::kernels()) { cpu::set_kernels(k); }
  ~ScopedKernels() { cpu::set_kernels(before_); }
  ScopedKernels(const ScopedKernels&) = delete;
  ScopedKernels& operator=(const ScopedKernels&) = delete;

 private:
  cpu::CpuKernels before_;
};

/// The kernel sets this binary has: builtin, and oneDNN where it was built with it.
inline std::vector<cpu::CpuKernels> kernel_sets() {
  std::vector<cpu::CpuKernels> sets{cpu::CpuKernels::kBuiltin};
  if (cpu::onednn_built()) sets.push_back(cpu::CpuKernels::kOnednn);
  return sets;
}

inline constexpr float kFdEps = 1e-3f;
inline constexpr double kFdRelTol = 1e-2;
inline constexpr double kFdAbsTol = 1e-3;

/// True when the analytic and numerical derivatives agree within the tolerances above.
inline bool gradients_agree(double analytic, double numeric) {
  const double scale = std::max(std::abs(analytic), std::abs(numeric));
  return std::abs(analytic - numeric) <= kFdRelTol * scale + kFdAbsTol;
}

/// n floats uniform in [lo, hi) from seed.
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * rng.next_float();
  return v;
}

/// Central difference of f at parameter p: (f(p + eps) - f(p - eps)) / (2 eps), restoring p.
template <typename F>
double central_difference(float& p, F&& f, float eps = kFdEps) {
  const float saved = p;
  p = saved + eps;
  const double plus = f();
  p = saved - eps;
  const double minus = f();
  p = saved;
  // Divide by the step actually taken in float, not the nominal 2 eps.
  const double step = static_cast<double>(saved + eps) - static_cast<double>(saved - eps);
  return (plus - minus) / step;
}

/// The central difference of f at p, or nothing where f has a kink within eps of p (a relu input
/// or a max-pooling choice that the step crosses): tasks::finite_difference with the tolerances
/// above.
template <typename F>
std::optional<double> smooth_central_difference(float& p, F&& f, float eps = kFdEps) {
  GradientCheckOptions options;
  options.eps = eps;
  options.relative_tolerance = kFdRelTol;
  options.absolute_tolerance = kFdAbsTol;
  return finite_difference(p, f, options);
}

/// A layer under a gradient check, with its parameters and gradients bound and its scratch
/// reserved for `batch`, and the objective L = sum_i y_i r_i (so dL/dy = r, r random).
struct LayerHarness {
  Layer& layer;
  std::size_t batch;
  std::vector<float> params = std::vector<float>(layer.parameter_count());
  std::vector<float> grads = std::vector<float>(layer.parameter_count());
  std::vector<float> x = random_floats(batch * layer.input_size(), 101);
  std::vector<float> r = random_floats(batch * layer.output_size(), 102);
  std::vector<float> y = std::vector<float>(batch * layer.output_size());
  std::vector<float> dx = std::vector<float>(batch * layer.input_size());
  /// Runs before every forward (a dropout test rewinds its mask there).
  std::function<void()> before_forward = [] {};

  LayerHarness(Layer& l, std::size_t b, std::uint64_t seed) : layer(l), batch(b) {
    layer.bind(params, grads);
    layer.reserve(batch);
    layer.initialize(seed);
  }

  double objective() {
    before_forward();
    layer.forward(x.data(), y.data(), batch);
    double l = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
    return l;
  }

  /// forward, then backward of r: fills grads and dx.
  void backward() {
    objective();
    layer.backward(x.data(), y.data(), r.data(), dx.data(), batch);
  }

  /// Checks every input and parameter gradient of backward() against central differences of
  /// the objective with step eps (gradients_agree).
  void check(float eps = kFdEps) {
    backward();
    const std::vector<float> analytic_dx = dx, analytic_grads = grads;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const double numeric = central_difference(
          params[i], [&] { return objective(); }, eps);
      INFO(layer.kind() << " parameter " << i << " analytic " << analytic_grads[i] << " numeric "
                        << numeric);
      CHECK(gradients_agree(analytic_grads[i], numeric));
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double numeric = central_difference(
          x[i], [&] { return objective(); }, eps);
      INFO(layer.kind() << " input " << i << " analytic " << analytic_dx[i] << " numeric "
                        << numeric);
      CHECK(gradients_agree(analytic_dx[i], numeric));
    }
  }
};

}  // namespace gradmesh::tasks::testing

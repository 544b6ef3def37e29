#pragma once
// A finite-difference check of a layer's backward pass, for users' own layers (issue 12: "the
// user-defined layer gets gradient-checked through the public API") and gradmesh's.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tasks/layers/layer.h"

namespace gradmesh::tasks {

/// How check_layer_gradients probes. Defaults suit float layers: central differences with step
/// 1e-3 carry ~1e-4 of rounding noise and ~1e-6 of truncation error, so a relative tolerance of
/// 1e-2 plus an absolute floor of 1e-3 tells a right gradient from a wrong one (a wrong sign or a
/// missing term is off by O(1)).
struct GradientCheckOptions {
  std::size_t batch = 3;   ///< samples per forward
  std::uint64_t seed = 1;  ///< inputs, the objective's weights, Layer::initialize
  float eps = 1e-3f;       ///< finite-difference step
  double relative_tolerance = 1e-2;
  double absolute_tolerance = 1e-3;
  /// Skip points where the function has a kink within eps (a relu input, a max-pooling choice):
  /// there the one-sided differences disagree and no difference says what the gradient is.
  bool skip_kinks = true;
};

/// Whether an analytic and a numerical derivative agree: |a - b| <= rel max(|a|, |b|) + abs.
[[nodiscard]] inline bool derivatives_agree(double a, double b, double relative_tolerance,
                                            double absolute_tolerance) noexcept {
  return std::abs(a - b) <=
         relative_tolerance * std::max(std::abs(a), std::abs(b)) + absolute_tolerance;
}

/// The central difference of f() at the float p, (f(p + eps) - f(p - eps)) / (the step taken in
/// float), p restored; or nothing when options.skip_kinks and f has a kink within eps of p (the
/// one-sided differences disagree by derivatives_agree): there no difference says what the
/// gradient is. Calls f three times.
template <typename F>
[[nodiscard]] std::optional<double> finite_difference(float& p, F&& f,
                                                      const GradientCheckOptions& options) {
  const float saved = p;
  const float eps = options.eps;
  const double center = f();
  p = saved + eps;
  const double plus = f();
  p = saved - eps;
  const double minus = f();
  p = saved;
  // The steps actually taken in float, not the nominal eps.
  const double up = static_cast<double>(saved + eps) - saved;
  const double down = saved - static_cast<double>(saved - eps);
  if (options.skip_kinks &&
      !derivatives_agree((plus - center) / up, (center - minus) / down, options.relative_tolerance,
                         options.absolute_tolerance)) {
    return std::nullopt;
  }
  return (plus - minus) / (up + down);
}

/// One derivative that disagreed.
struct GradientMismatch {
  bool parameter = false;  ///< a parameter's derivative (else an input's)
  std::size_t index = 0;   ///< its index in the parameters or in the batch's inputs
  double analytic = 0, numeric = 0;
};

/// What check_layer_gradients found.
struct GradientCheckResult {
  std::size_t checked = 0;  ///< derivatives compared
  std::size_t skipped = 0;  ///< at kinks (options.skip_kinks)
  std::vector<GradientMismatch> mismatches;
  [[nodiscard]] bool ok() const noexcept { return mismatches.empty() && checked > 0; }
  /// "checked 80, skipped 2, 1 mismatch: parameter 3 analytic 0.5 numeric -0.5" (the first 5).
  [[nodiscard]] std::string describe() const;
};

/// Checks every parameter and input derivative of layer.backward() against central differences
/// of the objective L = sum_i y_i r_i (r random, so dL/dy = r), on a random batch. Binds the layer
/// to parameter and gradient buffers of its own, reserves the batch and initializes the layer
/// from options.seed: use a fresh layer, on the host CPU backend (the default). Never throws for a
/// wrong gradient (it is reported); throws gradmesh::ContractError if the layer is on a device
/// backend. Cost: 2 (parameters + inputs) + 1 forward passes. Thread safety: the layer's.
[[nodiscard]] GradientCheckResult check_layer_gradients(Layer& layer,
                                                        const GradientCheckOptions& options = {});

}  // namespace gradmesh::tasks

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
#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/random.h"

namespace gradmesh::tasks::testing {

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

}  // namespace gradmesh::tasks::testing

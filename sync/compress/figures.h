#pragma once
// A compressed layer's accuracy figures over an epoch (issue 28, "tell the user what compression
// costs in accuracy"): what every compressing scheme (PowerSGD, top-k, random-k) reports through
// Scheme::epoch_figures().

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

namespace gradmesh::sync::compress {

/// Sums of one layer's per-step figures since the last flush(). Plain value; its owner locks it
/// (a scheme's step against its epoch_figures()).
struct CompressionFigures {
  std::uint64_t steps = 0;
  double error_sum = 0, residual_norm_sum = 0, residual_ratio_sum = 0;

  /// One compressed step: `input2` = ||p||^2 (p = g + e, what was compressed), `error2` =
  /// ||p - C(p)||^2 (what the compression lost), `residual2` = ||e'||^2 after the step (negative:
  /// no error feedback, nothing to add), `gradient2` = ||g||^2.
  void add(double input2, double error2, double residual2, double gradient2) {
    ++steps;
    if (input2 > 0) error_sum += std::sqrt(error2 / input2);
    if (residual2 < 0) return;
    residual_norm_sum += std::sqrt(residual2);
    if (gradient2 > 0) residual_ratio_sum += std::sqrt(residual2 / gradient2);
  }

  /// Writes the means over the steps since the last call as "compression_error.<name>" (||p -
  /// C(p)|| / ||p||: 0 nothing lost, 1 everything), "residual_norm.<name>" (||e||) and
  /// "residual_ratio.<name>" (||e|| / ||g||: how many iterations' worth of gradient error feedback
  /// holds back) into `out`, and starts over; nothing when there was no step.
  void flush(const std::string& name, std::map<std::string, double>& out) {
    if (steps == 0) return;
    const auto n = static_cast<double>(steps);
    out["compression_error." + name] = error_sum / n;
    out["residual_norm." + name] = residual_norm_sum / n;
    out["residual_ratio." + name] = residual_ratio_sum / n;
    *this = {};
  }
};

}  // namespace gradmesh::sync::compress

#pragma once
// Options of the planner's inputs (planner.*): the start-up probe and figures that override it.

#include <optional>

namespace gradmesh::sync {

/// planner.*. Each figure, when set, replaces what the start-up probe measured (or, with the probe
/// off, what the planner would otherwise assume: see AssumedRates).
struct PlannerOptions {
  bool probe = true;                ///< planner.probe: measure alpha, B, t_f, t_b, GEMM at start-up
  std::optional<double> alpha;      ///< planner.alpha, seconds of start-up per message
  std::optional<double> bandwidth;  ///< planner.bandwidth, B in bytes/s
  std::optional<double> gemm_flops;        ///< planner.gemm_flops, FLOP/s
  std::optional<double> message_overhead;  ///< planner.message_overhead, o in seconds (>= 0)
};

}  // namespace gradmesh::sync

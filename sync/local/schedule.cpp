#include "sync/local/schedule.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "sync/local/outer_exchange.h"
#include "sync/local/quorum_rounds.h"
#include "sync/plan_input.h"
#include "topo/cost_model.h"
#include "topo/planner.h"

namespace gradmesh::sync {

/// What H the options give or the measurements choose, with the predictions beside it.
LocalSchedule make_local_schedule(const SyncContext& ctx, const LocalOptions& options,
                                  const CompressionOptions& compression) {
  LocalSchedule s;
  const topo::PlannerInput input = planner_input(ctx, {std::string(topo::kAllReduceScheme)});
  const double compute = compute_seconds(input);
  double floats = 0;
  for (const topo::LayerProfile& layer : input.layers)
    floats += static_cast<double>(layer.parameters);
  s.iteration_seconds = compute;
  s.wire = local::outer_exchange_name(compression);
  s.fragments = options.fragments;
  if (ctx.nodes > 1 && options.quorum) {
    // Quorum rounds: every Delta to the leader, the model back (quorum_rounds.h).
    const local::OuterCost cost =
        local::quorum_exchange_cost(topo::cluster_cost(input), static_cast<std::size_t>(floats));
    s.exchange_seconds = cost.seconds;
    s.bytes_per_exchange = cost.bytes;
    s.inter_site_bytes = topo::inter_site_bytes(input.links, cost.traffic, cost.bytes);
    s.wire = "quorum of " + std::to_string(*options.quorum) + " of " + std::to_string(ctx.nodes) +
             ", merged by rank " + std::to_string(local::kQuorumLeader);
  } else if (ctx.nodes > 1) {
    // F exchanges of m / F floats a round (the largest fragment's cost, F times).
    const auto per_fragment = static_cast<std::size_t>(
        std::ceil(floats / static_cast<double>(std::max<std::size_t>(options.fragments, 1))));
    const local::OuterCost cost =
        local::outer_exchange_cost(topo::cluster_cost(input), per_fragment, compression);
    s.exchange_seconds = static_cast<double>(options.fragments) * cost.seconds;
    s.bytes_per_exchange = static_cast<double>(options.fragments) * cost.bytes;
    s.inter_site_bytes = topo::inter_site_bytes(input.links, cost.traffic, s.bytes_per_exchange);
  }
  s.automatic = !options.steps.has_value();
  s.steps =
      options.steps
          ? *options.steps
          : std::max(options.fragments,
                     local_steps_for(std::max(compute, 1e-9), s.exchange_seconds, kLocalUtilization,
                                     kMaxLocalSteps, options.overlap != OverlapKind::kOff));
  s.utilization =
      local_utilization(s.steps, compute, s.exchange_seconds, options.overlap != OverlapKind::kOff);
  return s;
}

std::size_t local_steps_for(double iteration_seconds, double exchange_seconds, double utilization,
                            std::size_t max_steps, bool overlap) {
  GRADMESH_CHECK(std::isfinite(iteration_seconds) && iteration_seconds > 0.0,
                 "local_steps_for: iteration seconds > 0");
  GRADMESH_CHECK(std::isfinite(exchange_seconds) && exchange_seconds >= 0.0,
                 "local_steps_for: exchange seconds >= 0");
  GRADMESH_CHECK(utilization > 0.0 && utilization < 1.0, "local_steps_for: utilization in (0, 1)");
  GRADMESH_CHECK(max_steps >= 1, "local_steps_for: max_steps >= 1");
  // Without overlap H t_c / (H t_c + t_x) >= u; with it H t_c / max(H t_c, t_x) >= u.
  const double factor = overlap ? utilization : utilization / (1.0 - utilization);
  const double needed = std::ceil(factor * exchange_seconds / iteration_seconds - 1e-9);
  if (!(needed < static_cast<double>(max_steps))) return max_steps;
  return std::max<std::size_t>(1, static_cast<std::size_t>(needed));
}

double local_utilization(std::size_t steps, double iteration_seconds, double exchange_seconds,
                         bool overlap) {
  const double busy = static_cast<double>(steps) * iteration_seconds;
  const double round = overlap ? std::max(busy, exchange_seconds) : busy + exchange_seconds;
  return round > 0 ? busy / round : 1.0;
}

}  // namespace gradmesh::sync

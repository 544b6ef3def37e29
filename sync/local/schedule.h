#pragma once
// Strategy local's schedule (issue 57, item 4): H, the inner steps between outer exchanges, given
// by sync.local.steps or chosen from the start-up measurements so that the exchange takes at most
// 5% of a round (DiLoCo, Douillard et al., arXiv 2311.08105, takes H by hand), with the
// predictions beside it.

#include <cstddef>
#include <string>

#include "sync/compress/options.h"
#include "sync/local/options.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// What choosing H saw and gave (LocalStage::summary()).
struct LocalSchedule {
  std::size_t steps = 1;          ///< H
  std::size_t fragments = 1;      ///< F
  double iteration_seconds = 0;   ///< predicted compute of one inner iteration, t_c
  double exchange_seconds = 0;    ///< predicted outer exchanges of a round (F fragments), t_x
  double bytes_per_exchange = 0;  ///< what one node sends in them, payload + frame headers
  /// What crosses site boundaries in them, all nodes together (topo::inter_site_bytes); 0 without
  /// sites (simulate --links)
  double inter_site_bytes = 0;
  double utilization = 1;  ///< H t_c / (H t_c + t_x): the share of time computing
  bool automatic = false;  ///< sync.local.steps = "auto"
  std::string wire;        ///< how Delta crosses the wire (outer_exchange_name)
};

/// sync.local.steps = "auto" (issue 57, item 4): the smallest H >= 1 whose predicted
/// utilization (local_utilization()) is >= `utilization`: without overlap H = ceil(u / (1 - u)
/// t_x / t_c), with it H = ceil(u t_x / t_c); at most `max_steps`; 1 when t_x = 0 (one node).
/// `iteration_seconds` t_c > 0, `exchange_seconds` t_x >= 0, seconds; `utilization` in (0, 1).
/// Pure. Throws ContractError for values out of range.
[[nodiscard]] std::size_t local_steps_for(double iteration_seconds, double exchange_seconds,
                                          double utilization, std::size_t max_steps,
                                          bool overlap = false);

/// The predicted share of a round's time spent computing, for H = `steps` inner iterations of
/// t_c seconds and an outer exchange of t_x seconds: H t_c / (H t_c + t_x) when the round waits
/// for the exchange, H t_c / max(H t_c, t_x) when the exchange overlaps the next round's inner
/// steps (sync.local.overlap). Pure.
[[nodiscard]] double local_utilization(std::size_t steps, double iteration_seconds,
                                       double exchange_seconds, bool overlap);

/// The auto H's target utilization (issue 57: ">= 95%") and its cap (a round of at most this
/// many iterations).
inline constexpr double kLocalUtilization = 0.95;
inline constexpr std::size_t kMaxLocalSteps = 10000;
/// The most fragments (sync.local.fragments): each takes a ring bucket and a message kind.
inline constexpr std::size_t kMaxLocalFragments = 1024;

/// The schedule of a job: H from `options` (or local_steps_for() on the predicted compute t_c of
/// an iteration and exchange t_x of a round: F exchanges of m / F floats under `compression`, or
/// the quorum rounds' star), at least F; the predicted bytes a node sends a round (and those
/// crossing sites, simulate --links) and the utilization. Throws what planner_input() throws.
[[nodiscard]] LocalSchedule make_local_schedule(const SyncContext& ctx, const LocalOptions& options,
                                                const CompressionOptions& compression);

}  // namespace gradmesh::sync

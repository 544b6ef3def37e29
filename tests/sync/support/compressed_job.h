#pragma once
// Test support shared by the compressed schemes' in-process tests (PowerSGD, top-k, random-k;
// issue 28): a synthetic job whose dense layers are fixed to one compressed scheme under `auto`.
// Header-only.

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sync/compress/options.h"
#include "sync/plan_input.h"
#include "sync/plan_stage.h"
#include "tests/sync/support/inproc_cluster.h"

namespace gradmesh::testing {

/// A SyntheticJob whose dense layers (0, 2, 4) the plan fixes to scheme `scheme` (e.g.
/// "powersgd", "topk"), the rest planned by `auto`; `options` are set on its
/// [sync.compression] table ("compression.method", ...). Throws as OptionValues::set.
inline SyntheticJob compressed_job(
    std::string scheme,
    std::initializer_list<std::pair<std::string_view, sync::OptionValue>> options) {
  SyntheticJob job;
  for (const auto& [key, value] : options) job.options.values.set(key, value);
  job.factory = [scheme =
                     std::move(scheme)](sync::SyncContext c) -> std::unique_ptr<sync::SyncStage> {
    auto input = sync::planner_input(c, sync::strategy_traits("auto").schemes);
    sync::add_compressed_schemes(sync::compression_options(c.options.values), input);
    input.fixed_schemes.assign(input.layers.size(), std::nullopt);
    for (const std::size_t l : {0, 2, 4}) input.fixed_schemes[l] = scheme;
    return std::make_unique<sync::PlanStage>(std::move(c), "auto", topo::make_plan(input));
  };
  return job;
}

/// Node `rank`'s parameters, copied.
inline std::vector<float> parameters(InProcCluster& cluster, std::size_t rank) {
  const auto p = cluster.node(rank).model().parameters();
  return {p.begin(), p.end()};
}

}  // namespace gradmesh::testing

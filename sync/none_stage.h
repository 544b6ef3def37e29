#pragma once
// Strategy `none`: a single node, no network — the baseline every distributed strategy is
// measured against (and must equal, for BSP strategies, on the union of the batches).

#include <string_view>
#include <vector>

#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// After backward_l, a compute task applies SGD to layer l (so the optimizer step of the top
/// layers overlaps the backward of the bottom ones, as WFBP does for communication).
class NoneStage final : public SyncStage {
 public:
  explicit NoneStage(SyncContext context);
  [[nodiscard]] std::string_view name() const noexcept override { return "none"; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  [[nodiscard]] std::vector<LayerPlan> plan() const override;

 private:
  SyncContext ctx_;
};

}  // namespace gradmesh::sync

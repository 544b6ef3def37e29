#pragma once
// A test-only per-layer scheme, "solo": each node steps a layer on its own gradient and sends
// nothing (local SGD with no averaging). It shows that a new scheme is its folder: its Scheme, its
// planner model (cost function), its own config table [sync.solo] and register_scheme() — this
// folder touches no shared file.

#include <memory>
#include <string>
#include <vector>

#include "sync/scheme.h"

namespace gradmesh::testing {

/// Steps each of its layers with the node's optimizer right after the layer's backward.
class SoloScheme final : public sync::Scheme {
 public:
  SoloScheme(const sync::SyncContext& ctx, std::vector<std::size_t> layers)
      : ctx_(ctx), layers_(std::move(layers)) {}

  void build(engine::Graph& graph, const sync::IterationTasks& tasks) override {
    if (!ctx_.options.values.flag("solo.step")) return;  // [sync.solo] step = false: frozen
    for (const std::size_t l : layers_) {
      (void)sync::add_local_step(graph, tasks, ctx_, l, "solo_step_");
    }
  }
  void fail_all(std::exception_ptr) override {}  // nothing ever waits
  [[nodiscard]] double bytes_sent(std::size_t) const override { return 0; }
  [[nodiscard]] std::string describe(std::size_t) const override { return "solo"; }

 private:
  const sync::SyncContext& ctx_;
  std::vector<std::size_t> layers_;
};

/// Its entry: the model prices a layer at its optimizer step only (nothing on the link).
inline sync::SchemeEntry solo_entry() {
  sync::SchemeEntry entry;
  entry.model.id = "solo";
  entry.model.cost = [](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    topo::SchemeCost cost;
    cost.compute_seconds =
        in.cluster.step_seconds_per_float * static_cast<double>(layer.parameters);
    return cost;
  };
  entry.make = [](const sync::SyncContext& ctx, sync::LaneRouter&, const topo::Plan&,
                  const std::vector<std::size_t>& layers) -> std::unique_ptr<sync::Scheme> {
    return std::make_unique<SoloScheme>(ctx, layers);
  };
  // [sync.solo] step: false freezes the layers solo holds (nothing is stepped).
  entry.options = {"solo", {sync::flag_key("step", true)}};
  return entry;
}

}  // namespace gradmesh::testing

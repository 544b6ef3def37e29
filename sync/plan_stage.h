#pragma once
// Strategies `none`, `ps`, `poseidon`, `allreduce` and `auto`: one stage that executes the
// planner's per-layer plan (topo/planner.h), each layer on its scheme (sync/scheme.h) — PS, SFB, an
// all-reduce bucket or any registered one — all on one transport (DESIGN.md "Strategies share one
// transport"). The strategies differ only in the schemes the planner may use
// (StrategyTraits::schemes): ps {PS}, poseidon {PS, SFB}, allreduce {all-reduce}, auto {all three}.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sync/lane_router.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"
#include "topo/planner.h"

namespace gradmesh::sync {

/// Executes `plan` (BSP): after each iteration every replica holds the same parameters, equal to
/// single-process SGD on the union of the n batches. With one node each layer steps locally.
/// It holds one Scheme per scheme id the plan names (scheme_entry(id).make, given that scheme's
/// layers) and asks only the Scheme interface. Thread safety and errors: as SyncStage and the
/// schemes.
class PlanStage final : public SyncStage {
 public:
  /// `name`: the strategy ("ps", "poseidon", "allreduce", "auto"); `plan`: made for this model,
  /// batch and node count (ContractError when its layers do not match the model or it names an
  /// unknown scheme).
  PlanStage(SyncContext context, std::string name, topo::Plan plan);

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  /// Per layer: the scheme (Scheme::describe: "PS", "SFB", "allreduce b<bucket>"; "local"), KV
  /// chunks, Poseidon's Table 1 floats under PS and SFB, and this rank's predicted wire bytes per
  /// iteration.
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  /// The plan's figures: "predicted_bytes_sent" (this rank, bytes per iteration),
  /// "predicted_iteration_seconds", "alpha" (s), "bandwidth" (bytes/s) and "message_overhead"
  /// (o, s) of the slowest link, "gemm_flops" (FLOP/s), "kv_chunk_floats", "buckets", and
  /// "budget_<lane>" (bytes per iteration).
  [[nodiscard]] std::map<std::string, double> summary() const override;
  [[nodiscard]] std::map<std::string, double> epoch_figures() override;
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return router_.rejected();
  }
  /// Checkpoints: the plan's signature (each layer's scheme and chunks, the chunk size, the
  /// buckets), so that a resume under another plan (measured again at start-up, planner.probe)
  /// is named: its sums run in another order, so it is not bitwise the uninterrupted run; a
  /// warning says so. Then each scheme's own state (Scheme::save_state, load_state: PS refreshes
  /// its KV shard's master copies from the loaded replica). Under another plan the saved scheme
  /// states (laid out by the other plan's schemes) are not read: each scheme keeps its own (at a
  /// resume, its initial one: residuals at 0) and takes the loaded replica.
  void save_state(engine::StateWriter& out) override;
  void load_state(engine::StateReader& in) override;
  /// The plan being executed.
  [[nodiscard]] const topo::Plan& executed_plan() const noexcept { return plan_; }

 private:
  SyncContext ctx_;
  std::string name_;
  topo::Plan plan_;
  LaneRouter& router_;
  std::vector<std::unique_ptr<Scheme>> schemes_;  // one per id, in order of first use
  std::vector<Scheme*> scheme_of_;                // by layer; nullptr: local
};

/// The plan stage of strategy `strategy` (its name, for the plan and the metrics) from the job's
/// options: the planner's input (planner_input) over `schemes` (StrategyTraits::schemes, scheme
/// ids; one node makes every layer local whatever they are), then `adjust` (a strategy's own
/// options, e.g. apply_poseidon_options), then the plan. Throws ConfigError naming a bad option.
[[nodiscard]] std::unique_ptr<SyncStage> make_plan_stage(
    SyncContext context, std::string_view strategy, const std::vector<std::string>& schemes,
    const std::function<void(const SyncOptions&, topo::PlannerInput&)>& adjust = {});

}  // namespace gradmesh::sync

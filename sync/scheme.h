#pragma once
// A per-layer scheme: one way to exchange a layer's gradient and step it (PS chunks, SFB, an
// all-reduce bucket; compressors next), and the registry of schemes (DESIGN.md, "Where the shape
// goes next": sync/scheme.h). PlanStage (sync/plan_stage.h) holds the schemes its plan names and
// asks only this interface; the planner prices a scheme by its topo::SchemeModel. A new scheme
// is its folder (its Scheme, its SchemeModel) and one entry: a line in registry.cpp's scheme
// table, or register_scheme() at run time (tests/sync/scheme/ adds one that way).

#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/graph.h"
#include "sync/sync_stage.h"
#include "topo/planner.h"
#include "topo/scheme_model.h"

namespace gradmesh::sync {

class LaneRouter;

/// The scheme of a set of layers in one job: its tasks in every iteration, what it sends, its
/// checkpoint state, and its pending work failed when a peer fails.
///
/// Thread safety: build() before the first run, from the node's thread; the tasks it adds run on
/// the executor's arenas; message handlers (which it routes on the LaneRouter) and fail_all() on
/// the transport's delivery thread; the const members from any thread. An implementation locks what
/// those share.
class Scheme {
 public:
  virtual ~Scheme() = default;

  /// Adds its tasks for its layers to one iteration's graph: after tasks.backward[l] of each of
  /// its layers l, before tasks.done (WFBP: it may send as soon as a layer's backward ended).
  virtual void build(engine::Graph& graph, const IterationTasks& tasks) = 0;
  /// Fails every waiting task, and every later one, with `error` (a PeerError; first one wins).
  virtual void fail_all(std::exception_ptr error) = 0;

  /// Wire bytes this rank sends for `layer` per iteration (payload + frame overhead), predicted;
  /// 0 for a layer not its own.
  [[nodiscard]] virtual double bytes_sent(std::size_t layer) const = 0;
  /// How the plan table names the scheme of `layer` ("PS", "SFB", "allreduce b0").
  [[nodiscard]] virtual std::string describe(std::size_t layer) const = 0;
  /// KV chunks of `layer` (a chunked scheme), else 0.
  [[nodiscard]] virtual std::size_t chunks(std::size_t layer) const {
    (void)layer;
    return 0;
  }

  /// Adds its per-layer figures since the last call to `out` ("<figure>.<layer name>", e.g.
  /// "compression_error.dense2"; SyncStage::epoch_figures()); default none. Between iterations.
  virtual void epoch_figures(std::map<std::string, double>& out) { (void)out; }

  /// Its state at an iteration boundary (e.g. error-feedback residuals), written after the plan's
  /// signature; default none. Between iterations only.
  virtual void save_state(engine::StateWriter& out) { (void)out; }
  /// Reads what save_state() wrote, after the model, optimizer and plan signature were loaded
  /// (PS refreshes its KV shard's master copies from the loaded replica). Between iterations.
  virtual void load_state(engine::StateReader& in) { (void)in; }
};

/// Adds task "<prefix><layer>" that steps `layer` with the node's optimizer on its own gradient
/// right after tasks.backward[layer], before tasks.done (a layer with nothing to exchange: one
/// node, or a scheme that keeps layers local). Returns the task.
engine::TaskHandle add_local_step(engine::Graph& graph, const IterationTasks& tasks,
                                  const SyncContext& ctx, std::size_t layer,
                                  const std::string& prefix = "step_");

/// Makes a scheme for `layers` (its layers in the plan, ascending) of the job `ctx` on `router`,
/// executing `plan` (the chunk size, the buckets). May throw ConfigError or ContractError.
using SchemeFactory = std::function<std::unique_ptr<Scheme>(
    const SyncContext& ctx, LaneRouter& router, const topo::Plan& plan,
    const std::vector<std::size_t>& layers)>;

/// A registered scheme: how the planner prices it and how a node makes it.
struct SchemeEntry {
  topo::SchemeModel model;              ///< id, fits, cost function, lanes, placement
  std::vector<std::string_view> lanes;  ///< transport lanes it routes (the registry's names)
  SchemeFactory make;
  /// Its own config table [sync.<name>] (name "": none): the job config accepts, checks and
  /// prints its keys; the scheme reads them from SyncContext::options.values.
  OptionTable options;
};

/// The scheme registered as `id`: the built-ins (registry.cpp), then register_scheme()'s.
/// Throws ContractError naming the known ids for an unknown one. Thread-safe.
[[nodiscard]] const SchemeEntry& scheme_entry(std::string_view id);

/// The models of schemes `ids`, in that order (a strategy's StrategyTraits::schemes), for
/// topo::PlannerInput::schemes. Throws as scheme_entry().
[[nodiscard]] std::vector<topo::SchemeModel> scheme_models(const std::vector<std::string>& ids);

/// Adds a scheme at run time, before any plan names it (a test's, a plug-in's). Its lanes must
/// be lanes the registry declares (lane ids are the same on every node; a scheme that sends on
/// a lane of its own declares it in registry.cpp's scheme table). Throws ContractError for an id
/// taken or "local", an unknown lane, or a model without a cost function or an entry without a
/// factory. Thread-safe; entries stay until the process ends.
void register_scheme(SchemeEntry entry);

}  // namespace gradmesh::sync

// The strategy registry (STYLE.md practice 2): each strategy's name, the stages it sends on and its
// factory. Adding a strategy touches this file and its own folder, nothing else shared.

#include <algorithm>
#include <functional>
#include <iterator>

#include "engine/error.h"
#include "sync/ako/ako_stage.h"
#include "sync/ako/messages.h"
#include "sync/allreduce/messages.h"
#include "sync/channel.h"
#include "sync/plan_stage.h"
#include "sync/poseidon/messages.h"
#include "sync/probe/messages.h"
#include "sync/ps/messages.h"
#include "sync/resume/resume_agreement.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

namespace {

using Factory = std::function<std::unique_ptr<SyncStage>(SyncContext)>;

/// Stages every job has, whatever its strategy (the start-up link probe, the resume agreement):
/// listed first, so the probe's id is 0 whatever strategies the registry holds.
constexpr std::string_view kCommonStages[] = {probe::kStage, kResumeStage};

struct Entry {
  std::string name;
  std::vector<std::string_view> stages;  // the transport stages it sends on
  Factory make;                          // empty: documented but not built yet
  std::size_t max_nodes = 0;             // the most nodes it trains (0: any)
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"none", {},
       [](SyncContext c) -> std::unique_ptr<SyncStage> {
         return make_plan_stage(std::move(c), "none");  // one node: every layer local
       },
       1},
      {"ps", {ps::kPushStage, ps::kBroadcastStage},
       [](SyncContext c) { return make_plan_stage(std::move(c), "ps"); }},
      {"poseidon", {ps::kPushStage, ps::kBroadcastStage, sfb::kStage},
       [](SyncContext c) { return make_plan_stage(std::move(c), "poseidon"); }},
      {"ako", {ako::kPartitionStage, ako::kControlStage, ako::kFullRoundStage, ako::kAverageStage},
       [](SyncContext c) -> std::unique_ptr<SyncStage> {
         return std::make_unique<AkoStage>(std::move(c));
       }},
      {"allreduce", {allreduce::kStage},
       [](SyncContext c) { return make_plan_stage(std::move(c), "allreduce"); }},
      {"auto", {ps::kPushStage, ps::kBroadcastStage, sfb::kStage, allreduce::kStage},
       [](SyncContext c) { return make_plan_stage(std::move(c), "auto"); }},
  };
  return entries;
}

std::string known_names() {
  std::string out;
  for (const Entry& e : registry()) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& stage_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out(std::begin(kCommonStages), std::end(kCommonStages));
    for (const Entry& e : registry()) {
      for (const std::string_view stage : e.stages) {
        if (std::find(out.begin(), out.end(), stage) == out.end()) out.emplace_back(stage);
      }
    }
    return out;
  }();
  return names;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.push_back(e.name);
  return names;
}

std::uint64_t SyncStage::join() {
  throw ConfigError("sync.strategy = \"" + std::string(name()) +
                    "\" cannot take a restarted node back from a live peer's state (ako can; a "
                    "BSP job with checkpoint.dir takes it back at a checkpoint boundary through "
                    "app::run_with_recovery: README \"When a peer fails\")");
}

namespace {

const Entry& entry(std::string_view name, std::size_t nodes) {
  for (const Entry& e : registry()) {
    if (e.name != name) continue;
    if (!e.make) {
      throw ConfigError("sync.strategy = \"" + std::string(name) +
                        "\": this strategy is not implemented yet in this build; available: " +
                        known_names());
    }
    if (e.max_nodes != 0 && nodes > e.max_nodes) {
      throw ConfigError("sync.strategy = \"" + std::string(name) + "\" trains " +
                        (e.max_nodes == 1 ? std::string("a single node")
                                          : "at most " + std::to_string(e.max_nodes) + " nodes") +
                        ", but the peer list has " + std::to_string(nodes) +
                        " nodes: use ps (or run one node)");
    }
    return e;
  }
  throw ConfigError("sync.strategy = \"" + std::string(name) + "\": expected one of " +
                    known_names());
}

}  // namespace

void check_strategy(std::string_view name, std::size_t nodes) { (void)entry(name, nodes); }

std::unique_ptr<SyncStage> make_sync_stage(std::string_view name, SyncContext context) {
  const std::size_t nodes = context.nodes;
  return entry(name, nodes).make(std::move(context));
}

}  // namespace gradmesh::sync

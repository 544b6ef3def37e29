// Tests for sync/registry.cpp: what the registry knows of each strategy, checked before any
// connection.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

using namespace gradmesh;

namespace {

std::string config_error(const std::string& name, std::size_t nodes) {
  try {
    sync::check_strategy(name, sync::StartFacts{nodes});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("check_strategy: known names, and none on one node only", "[sync][registry]") {
  std::vector<std::string> single_node;  // the strategies that refuse 4 nodes
  for (const std::string& name : sync::strategy_names()) {
    INFO(name);
    CHECK(config_error(name, 1).empty());
    if (!config_error(name, 4).empty()) single_node.push_back(name);
  }
  CHECK(single_node == std::vector<std::string>{"none"});
  const std::string none = config_error("none", 4);
  CHECK(none.find("sync.strategy = \"none\" trains a single node") != std::string::npos);
  CHECK(none.find("4 nodes") != std::string::npos);
  const std::string unknown = config_error("bogus", 2);
  CHECK(unknown.find("sync.strategy = \"bogus\": expected one of none, ps") != std::string::npos);
}

TEST_CASE("strategy traits: what the node asks of a strategy instead of its name",
          "[sync][registry]") {
  // BSP: one model at every iteration boundary.
  std::vector<std::string> bsp, live;
  for (const std::string& name : sync::strategy_names()) {
    const sync::StrategyTraits& t = sync::strategy_traits(name);
    if (t.bsp) bsp.push_back(name);
    if (t.live_membership) live.push_back(name);
    CHECK_FALSE((t.bsp && t.live_membership));
    // Every BSP strategy rolls back; a re-split by replica is a rollback's, of replicas that
    // differ (not BSP); a strategy that goes on by itself does not roll back.
    if (t.bsp) CHECK(t.rolls_back);
    if (t.resplit_by_replica) CHECK((t.rolls_back && !t.bsp));
    if (t.live_membership) CHECK_FALSE(t.rolls_back);
  }
  CHECK(bsp == std::vector<std::string>{"ps", "poseidon", "allreduce", "auto"});
  CHECK(live == std::vector<std::string>{"ako"});
  CHECK(sync::strategies_with(&sync::StrategyTraits::live_membership) == "ako");
  // Rollback to checkpoints and re-splits: the BSP strategies, and local by replica.
  CHECK(sync::strategy_traits("local").rolls_back);
  CHECK(sync::strategy_traits("local").resplit_by_replica);
  // Going on without a failed peer by itself: ako always, local with quorum rounds.
  sync::OptionValues values;
  CHECK(sync::goes_on_without_failed_peers("ako", values));
  CHECK_FALSE(sync::goes_on_without_failed_peers("local", values));
  CHECK_FALSE(sync::goes_on_without_failed_peers("ps", values));
  sync::OptionValues quorum = values;
  quorum.set("local.quorum", std::int64_t{3});
  CHECK(sync::goes_on_without_failed_peers("local", quorum));
  // Every strategy but ako steps the job's optimizer (any optimizer.algorithm).
  CHECK(sync::strategies_with(&sync::StrategyTraits::any_optimizer) ==
        "none, ps, poseidon, allreduce, local, auto");
  // The planner's schemes, in its tie order (PS, then all-reduce, then SFB).
  using Ids = std::vector<std::string>;
  const auto schemes = [](const char* name) { return sync::strategy_traits(name).schemes; };
  CHECK(schemes("ps") == Ids{"ps"});
  CHECK(schemes("poseidon") == Ids{"ps", "sfb"});
  CHECK(schemes("allreduce") == Ids{"allreduce"});
  CHECK(schemes("auto") == Ids{"ps", "allreduce", "sfb"});
  CHECK(schemes("ako").empty());
  CHECK(schemes("none").empty());
  for (const std::string& id : schemes("auto")) CHECK(sync::scheme_entry(id).model.id == id);
  CHECK_THROWS_WITH(sync::scheme_entry("fp17"), Catch::Contains("fp17") && Catch::Contains("sfb"));
  CHECK(sync::strategy_traits("none").max_nodes == 1);
  // A plan of several nodes for `none` shows the default strategy's.
  CHECK(sync::strategy_for_nodes("none", 4) == "ps");
  CHECK(sync::strategy_for_nodes("none", 1) == "none");
  CHECK(sync::strategy_for_nodes("ako", 4) == "ako");
  CHECK_THROWS_WITH(sync::strategy_traits("bogus"),
                    Catch::Contains("sync.strategy = \"bogus\": expected one of none, ps"));
}

TEST_CASE("a strategy checks its own options before any connection", "[sync][registry]") {
  sync::SyncOptions options;  // ako with p = auto and no bandwidth anywhere
  // Nothing will measure B: eq. 3 has no rate, named by its keys.
  CHECK_THROWS_AS(sync::check_strategy("ako", sync::StartFacts{4, false, false}, options),
                  ConfigError);
  // The probe measures it, a rejoining node takes p from its donor, one node needs none.
  CHECK_NOTHROW(sync::check_strategy("ako", sync::StartFacts{4, false, true}, options));
  CHECK_NOTHROW(sync::check_strategy("ako", sync::StartFacts{4, true, false}, options));
  CHECK_NOTHROW(sync::check_strategy("ako", sync::StartFacts{1, false, false}, options));
  options.values.set("ako.partitions", std::int64_t{4});  // an explicit p needs no rate
  CHECK_NOTHROW(sync::check_strategy("ako", sync::StartFacts{4, false, false}, options));
  CHECK_NOTHROW(sync::check_strategy("ps", sync::StartFacts{4, false, false}, options));
}

// Tests for sync/registry.cpp: what the registry knows of each strategy, checked before any
// connection.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "sync/sync_stage.h"

using namespace gradmesh;

namespace {

std::string config_error(const std::string& name, std::size_t nodes) {
  try {
    sync::check_strategy(name, nodes);
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

// gradmesh-node: one node of a gradmesh job (DESIGN.md, "Contracts").
//
//   gradmesh-node --config JOB.toml --peers HOST:PORT,... --rank R [--set KEY=VALUE]...
//   gradmesh-node plan --config JOB.toml --nodes N [--bandwidth 1gbit]

#include <cstring>

#include <CLI/CLI.hpp>

#include "apps/node/node.h"

namespace {

int plan_main(int argc, char** argv) {
  CLI::App app{"gradmesh-node plan: print the planner's per-layer table and exit"};
  gradmesh::app::PlanOptions plan;
  app.add_option("--config", plan.config, "job config (TOML)")->required();
  app.add_option("--nodes", plan.nodes, "number of nodes to plan for")->required();
  app.add_option("--bandwidth", plan.bandwidth, "per-node bandwidth, e.g. 1gbit or 125MB");
  app.add_option("--set", plan.overrides, "override a config key: KEY=VALUE")->take_all();
  CLI11_PARSE(app, argc, argv);
  return gradmesh::app::run_plan(plan);
}

}  // namespace

int main(int argc, char** argv) {
  // `gradmesh-node plan ...`: the planner's table (argv[1] is the subcommand).
  if (argc > 1 && std::strcmp(argv[1], "plan") == 0) return plan_main(argc - 1, argv + 1);
  const auto cli = gradmesh::app::parse_node_command_line(
      argc, argv, "gradmesh-node (or `gradmesh-node plan --help`)");
  if (!cli.options) return cli.exit_status;
  return gradmesh::app::run_node(*cli.options);
}

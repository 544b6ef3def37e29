// gradmesh-node: one node of a gradmesh job (DESIGN.md, "Contracts").
//
//   gradmesh-node --config JOB.toml --peers HOST:PORT,... --rank R [--set KEY=VALUE]...
//   gradmesh-node plan --config JOB.toml --nodes N [--bandwidth 1gbit]

#include <CLI/CLI.hpp>

#include "apps/node/node.h"

int main(int argc, char** argv) {
  CLI::App app{"gradmesh-node: one node of a peer-to-peer data-parallel training job"};
  app.set_version_flag("--version", "gradmesh-node 0.1.0");

  gradmesh::app::NodeOptions node;
  std::string config;
  std::string metrics_out;
  app.add_option("--config", config, "job config (TOML); see configs/README.md");
  app.add_option("--peers", node.peers,
                 "every node's HOST:PORT, comma-separated, in rank order (default: from SLURM's "
                 "or torchrun's variables if set, else one local node; README \"Launching\")");
  app.add_option("--peers-file", node.peers_file, "file with one HOST:PORT per line, in rank order");
  app.add_option("--rank", node.rank,
                 "this node's rank (default: GRADMESH_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or RANK)");
  app.add_option("--set", node.overrides, "override a config key: KEY=VALUE (repeatable)")
      ->take_all();
  app.add_option("--metrics-out", metrics_out, "write DIR/node-<rank>.json at the end");
  app.add_flag("--save-parameters", node.save_parameters,
               "also write the final parameters to DIR/parameters-<rank>.f32 (float32, raw)");
  app.add_flag("--trace", node.trace,
               "also write a Chrome trace of every task to DIR/trace-<rank>.json");
  app.add_flag("-v,--verbose", node.verbose, "debug logging; print the effective config");

  gradmesh::app::PlanOptions plan;
  auto* plan_cmd = app.add_subcommand("plan", "print the planner's per-layer table and exit");
  plan_cmd->add_option("--config", plan.config, "job config (TOML)")->required();
  plan_cmd->add_option("--nodes", plan.nodes, "number of nodes to plan for")->required();
  plan_cmd->add_option("--bandwidth", plan.bandwidth, "per-node bandwidth, e.g. 1gbit or 125MB");
  plan_cmd->add_option("--set", plan.overrides, "override a config key: KEY=VALUE")->take_all();

  CLI11_PARSE(app, argc, argv);

  if (*plan_cmd) return gradmesh::app::run_plan(plan);
  if (config.empty()) {
    std::fprintf(stderr, "gradmesh-node: --config is required (see --help)\n");
    return 2;
  }
  node.config = config;
  if (!metrics_out.empty()) node.metrics_out = metrics_out;
  return gradmesh::app::run_node(node);
}

// gradmesh-node: one node of a gradmesh job (DESIGN.md, "Contracts").
//
//   gradmesh-node --config JOB.toml --peers HOST:PORT,... --rank R [--set KEY=VALUE]...
//   gradmesh-node plan --config JOB.toml --nodes N [--bandwidth 1gbit]
//   gradmesh-node simulate --config JOB.toml [--nodes 2,4,...] [--bandwidth RATE | --links FILE]
//                          [--strategy S]... [--compression M]
//                          [--device 6.1tflops:0.45 | --device PROFILE.toml] [--json]
//   gradmesh-node profile --config JOB.toml -o PROFILE.toml [--nodes N]

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/node/node.h"
#include "apps/node/planning.h"

namespace {

/// The options every planning subcommand takes: --config (required) and --set KEY=VALUE.
void add_job_options(CLI::App& app, std::filesystem::path& config,
                     std::vector<std::string>& overrides) {
  app.add_option("--config", config, "job config (TOML)")->required();
  app.add_option("--set", overrides, "override a config key: KEY=VALUE")->take_all();
}

int plan_main(int argc, char** argv) {
  CLI::App app{"gradmesh-node plan: print the planner's per-layer table and exit"};
  gradmesh::app::PlanOptions plan;
  add_job_options(app, plan.config, plan.overrides);
  app.add_option("--nodes", plan.nodes, "number of nodes to plan for")->required();
  app.add_option("--bandwidth", plan.bandwidth, "per-node bandwidth, e.g. 1gbit or 125MB");
  CLI11_PARSE(app, argc, argv);
  return gradmesh::app::run_plan(plan);
}

int simulate_main(int argc, char** argv) {
  CLI::App app{
      "gradmesh-node simulate: predict the job on 2 to 1,024 nodes with the planner's models (no "
      "data, no network)"};
  gradmesh::app::SimulateOptions simulate;
  add_job_options(app, simulate.config, simulate.overrides);
  app.add_option("--nodes", simulate.nodes, "node counts, e.g. 2,4,8 (default 2, 4, ..., 1024)")
      ->delimiter(',');
  app.add_option("--bandwidth", simulate.bandwidth, "every link's rate, e.g. 1gbit or 125MB");
  app.add_option("--links", simulate.links,
                 "a links file: sites of hosts, the links inside them and each site's uplink "
                 "(TOML: [intra], [inter], [[site]]; docs/scale.md); the node count is its hosts")
      ->check(CLI::ExistingFile);
  app.add_option("--strategy", simulate.strategies,
                 "a strategy to predict (repeat or comma-separate; default the job's)")
      ->delimiter(',');
  app.add_option("--compression", simulate.compression,
                 "sync.compression.method for every strategy (e.g. powersgd)");
  app.add_option("--device", simulate.device,
                 "a device profile file (gradmesh-node profile -o FILE), or a device by its peak "
                 "and the share the layers reach, e.g. 6.1tflops:0.45");
  app.add_option("--images-per-second", simulate.images_per_second,
                 "one node's training throughput (e.g. a paper's): the device's rate follows");
  app.add_flag("--json", simulate.json, "print one JSON document instead of the table");
  CLI11_PARSE(app, argc, argv);
  return gradmesh::app::run_simulate(simulate);
}

int profile_main(int argc, char** argv) {
  CLI::App app{
      "gradmesh-node profile: time this machine's compute for the job (as a node's start-up "
      "profile does) and write it as a device profile for `simulate --device FILE`"};
  gradmesh::app::ProfileOptions profile;
  add_job_options(app, profile.config, profile.overrides);
  app.add_option("-o,--output", profile.output, "the profile file to write (TOML)")->required();
  app.add_option("--nodes", profile.nodes, "the node count SFB's GEMM is sized for (default 2)");
  CLI11_PARSE(app, argc, argv);
  return gradmesh::app::run_profile(profile);
}

}  // namespace

int main(int argc, char** argv) {
  // `gradmesh-node plan ...`: the planner's table (argv[1] is the subcommand).
  if (argc > 1 && std::strcmp(argv[1], "plan") == 0) return plan_main(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "simulate") == 0) {
    return simulate_main(argc - 1, argv + 1);
  }
  if (argc > 1 && std::strcmp(argv[1], "profile") == 0) return profile_main(argc - 1, argv + 1);
  const auto cli = gradmesh::app::parse_node_command_line(
      argc, argv,
      "gradmesh-node (or `gradmesh-node plan --help`, `gradmesh-node simulate --help`, "
      "`gradmesh-node profile --help`)");
  if (!cli.options) return cli.exit_status;
  return gradmesh::app::run_node(*cli.options);
}

#pragma once
// One gradmesh node: load the job, join the peers, train, report (DESIGN.md, "Run a node").

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::app {

/// What `gradmesh-node --config ... --peers ... --rank ...` was given.
struct NodeOptions {
  std::filesystem::path config;
  std::vector<std::string> overrides;        ///< --set KEY=VALUE, in order
  /// --peers HOST:PORT,...; with neither this nor --peers-file: SLURM's or torchrun's variables
  /// (topo/launch_environment.h), else one local node.
  std::string peers;
  std::filesystem::path peers_file;          ///< --peers-file
  std::optional<long long> rank;             ///< --rank; else from the environment
  std::optional<std::filesystem::path> metrics_out;  ///< --metrics-out DIR
  bool save_parameters = false;              ///< --save-parameters: DIR/parameters-<rank>.f32
  bool trace = false;                        ///< --trace: DIR/trace-<rank>.json (Chrome trace of every task)
  bool verbose = false;
};

/// Runs the node to the end of the job. Returns the process exit status (0 on success). Errors
/// (bad config, unreachable or failing peers, bad data) are printed to stderr naming the key,
/// rank or path, and give a non-zero status: 2 for configuration errors, 1 for the rest.
int run_node(const NodeOptions& options);

/// What `gradmesh-node plan --config ... --nodes N [--bandwidth RATE]` was given.
struct PlanOptions {
  std::filesystem::path config;
  std::vector<std::string> overrides;
  std::size_t nodes = 1;
  std::optional<std::string> bandwidth;  ///< e.g. "1gbit"; used to predict seconds per iteration
};

/// Prints the planner's per-layer table for rank 0 and exits (no data, no network).
int run_plan(const PlanOptions& options);

}  // namespace gradmesh::app

#pragma once
// gradmesh-node's planning subcommands (DESIGN.md, "Contracts"): `plan` prints the planner's
// per-layer table for one node count; `simulate` predicts the job on clusters that are not here
// (issue 58), from the same planner and cost models the nodes run with.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::app {

/// What `gradmesh-node plan --config ... --nodes N [--bandwidth RATE]` was given.
struct PlanOptions {
  std::filesystem::path config;
  std::vector<std::string> overrides;
  std::size_t nodes = 1;
  std::optional<std::string> bandwidth;  ///< e.g. "1gbit"; used to predict seconds per iteration
};

/// Prints the planner's per-layer table for rank 0 and exits (no data, no network).
int run_plan(const PlanOptions& options);

/// What `gradmesh-node simulate` was given.
struct SimulateOptions {
  std::filesystem::path config;
  std::vector<std::string> overrides;
  /// Node counts, each >= 2 (default: 2, 4, 8, ..., 1024).
  std::vector<std::size_t> nodes;
  std::optional<std::string> bandwidth;  ///< every link's rate, e.g. "1gbit" (as plan's)
  /// A links file (links_file.h): sites of hosts, their links and uplinks, instead of one rate;
  /// the node count is then the sites' hosts.
  std::optional<std::filesystem::path> links;
  /// Strategies to predict (default: the job's sync.strategy).
  std::vector<std::string> strategies;
  std::optional<std::string> compression;  ///< sync.compression.method for every strategy
  /// A device: a profile file written by `gradmesh-node profile` (device_profile.h), or its peak
  /// rate and the share of it the layers reach, "6.1tflops:0.45" (parse_device_rate()); nullopt:
  /// this machine's measured (or the planner's assumed) times.
  std::optional<std::string> device;
  /// One node's training throughput, samples/s (a paper's single-node figure): the device rate
  /// is then the one at which the job's one-node iteration takes batch / this (no --device).
  std::optional<double> images_per_second;
  bool json = false;  ///< one JSON document instead of the table
};

/// One strategy at one node count, as the planner predicts it.
struct SimulatedRun {
  std::string strategy;
  std::size_t nodes = 0;
  double iteration_seconds = 0;    ///< predicted, communication and overlap included
  double samples_per_second = 0;   ///< nodes x batch / iteration_seconds
  double efficiency = 0;           ///< one node's iteration alone over iteration_seconds
  double bytes_per_iteration = 0;  ///< what one node sends an iteration, payload + frames
  /// What crosses site boundaries an iteration, all nodes together, bytes (0 without --links)
  double inter_site_bytes = 0;
  double plan_seconds = 0;  ///< wall time of building this plan, seconds (measured)
  std::string note;         ///< e.g. "local H=123": what the plan chose in a word
};

/// `--device PEAK:EFFICIENCY`: FLOP/s reached, PEAK x EFFICIENCY. PEAK is a number with a unit
/// flops, kflops, mflops, gflops, tflops or pflops (any case; "6.1tflops"), EFFICIENCY a number
/// in (0, 1]. Throws ConfigError naming --device and what was expected. Pure.
[[nodiscard]] double parse_device_rate(const std::string& text);

/// What `gradmesh-node profile --config JOB -o FILE [--nodes N]` was given.
struct ProfileOptions {
  std::filesystem::path config;
  std::vector<std::string> overrides;
  std::filesystem::path output;
  std::size_t nodes = 2;  ///< the node count the SFB GEMM's shape is sized for
};

/// Times this machine's compute for the job as a node's start-up profile does (every layer's
/// forward and backward, the GEMM, the optimizer step, and the codec of sync.compression.method
/// when it has one; planner.probe's measurements whatever the config says) and writes it to
/// options.output as a device profile (device_profile.h) for `simulate --device FILE`. Prints
/// what it wrote; returns the exit status as run_simulate().
int run_profile(const ProfileOptions& options);

/// What simulate() predicts.
struct Simulation {
  std::string job;                 ///< job.name
  std::size_t batch = 0;           ///< samples per node per iteration
  std::size_t parameters = 0;      ///< the model's
  double one_node_seconds = 0;     ///< one node's iteration alone (sync::compute_seconds)
  bool measured = false;           ///< layer times timed here (planner.probe), else assumed
  double device_flops = 0;         ///< --device's FLOP/s reached (0: no --device rate)
  std::string profile;             ///< --device's profile file and its device ("": none)
  std::string links;               ///< --links: the file and its sites in words ("": none)
  std::vector<SimulatedRun> runs;  ///< every node count for every strategy, in that order
};

/// The predictions of `options`. With `device` naming a file, its profile's times are the
/// job's compute (checked to fit the model and batch: check_profile_fits()); its codec times are
/// used when --compression (or the job's) is the method it timed, else the planner's assumed codec
/// rates. With `device` a rate, every layer's forward and backward take their
/// FLOPs at the device's rate R (sync::layer_seconds, the planner's model without measurements),
/// the GEMM runs at R, and the optimizer step and the compressor's encodes and decodes run R /
/// this machine's GEMM rate times faster than measured here (the planner's assumed rates with
/// planner.probe = false): one factor for every part of the compute. With `images_per_second`
/// the rate is solved for: one node's iteration is linear in 1 / R, so one pass at a reference
/// rate gives it. Strategies without a predicted iteration (ako, none) are refused. With `links`
/// the planner takes the file's link matrix as the probe's (site_link_matrix(), o the assumed
/// 10 us unless planner.message_overhead) at its one node count, and each scheme's cost charges
/// the link its traffic sees (topo::traffic_link: a ring crosses each site boundary once, an
/// all-to-all scheme's bytes share each site's uplink); --links with --bandwidth, planner.alpha
/// or planner.bandwidth, or with --nodes other than the file's hosts, is refused. Throws
/// ConfigError for a bad config, node count, strategy, rate or links file (naming it), what the
/// model's construction throws otherwise. Not thread-safe (sets the CPU kernels).
[[nodiscard]] Simulation simulate(const SimulateOptions& options);

/// Prints simulate()'s table (or JSON) to stdout; returns the exit status (2 for a configuration
/// error, printed to stderr naming the key, 1 for other errors).
int run_simulate(const SimulateOptions& options);

}  // namespace gradmesh::app

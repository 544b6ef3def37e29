#pragma once
// gradmesh-launch: runs N gradmesh-node processes on one machine (DESIGN.md, "Contracts":
// "Run N local nodes").
//
// Each node is started as
//   NODE --config JOB.toml --peers 127.0.0.1:p0,...,127.0.0.1:pN-1 --rank r
//        [--metrics-out DIR] [--set K=V ...] [--resume DIR] [extra node args]
// By default the nodes' stdout is merged into one console (apps/launch/console.h): a line every
// node prints appears once, warnings and errors with their ranks, one progress bar for the job
// (on a terminal; elsewhere a plain progress line every 30 s), one line per epoch; the nodes
// write records for it (GRADMESH_CONSOLE=records). With all_ranks (--all-ranks, -v) every line
// of every node is relayed as it comes, prefixed "[r] ". Stderr lines are always relayed so.
// Process handling runs on one libuv loop in the calling thread: no threads.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::app {

/// What to launch. A plain value; checked by run_launcher().
struct LaunchOptions {
  std::size_t nodes = 0;                             ///< N, >= 1
  std::filesystem::path config;                      ///< the job config, passed to every node
  std::optional<std::filesystem::path> metrics_out;  ///< --metrics-out DIR (created if missing)
  std::vector<std::string> overrides;                ///< --set KEY=VALUE, passed in order
  /// --resume DIR, passed to every node (README "Checkpoints and resume").
  std::optional<std::filesystem::path> resume;
  std::filesystem::path node_binary;  ///< the gradmesh-node executable
  std::uint16_t base_port = 0;  ///< ports base_port..base_port+N-1; 0: free ports picked by the OS
  std::string host = "127.0.0.1";      ///< the address every node listens on
  std::vector<std::string> node_args;  ///< extra arguments after "--", appended to each node's
  /// After the first node fails, how long the others may keep running (seconds) before they
  /// get SIGTERM; also how long after a forwarded SIGINT/SIGTERM.
  double grace_seconds = 15.0;
  double kill_after_seconds = 5.0;  ///< after SIGTERM, how long before SIGKILL (seconds)
  bool verbose = false;             ///< print each node's command line to stderr before starting
  /// Relay every node's lines as they come ("[r] ..."), as the nodes print them (bars, epoch
  /// lines), instead of the merged console.
  bool all_ranks = false;
  /// --log-dir DIR: each node's whole output (stdout and stderr, as it printed them) also goes to
  /// DIR/node-<rank>.log (DIR created if missing).
  std::optional<std::filesystem::path> log_dir;
};

/// The default node binary: `gradmesh-node` in the directory of the running executable
/// (/proc/self/exe). Returns "gradmesh-node" if /proc/self/exe cannot be read.
[[nodiscard]] std::filesystem::path default_node_binary();

/// N TCP ports on `host`: base_port..base_port+n-1 if base_port != 0, else n distinct ports that
/// were free a moment ago (each found by binding port 0; all held open until all are found).
/// @throws gradmesh::ConfigError if the range passes 65535, `host` is not an IPv4 address, or
///         the OS cannot bind (naming errno's text).
[[nodiscard]] std::vector<std::uint16_t> pick_ports(std::size_t n, std::uint16_t base_port,
                                                    const std::string& host);

/// The argument vector of rank `rank` (argv[0] is options.node_binary), for `ports` as given by
/// pick_ports().
[[nodiscard]] std::vector<std::string> node_command(const LaunchOptions& options,
                                                    const std::vector<std::uint16_t>& ports,
                                                    std::size_t rank);

/// Checks `options`, starts the N nodes and relays their output until all have exited.
///
/// When a node exits non-zero or by a signal, the others get options.grace_seconds to finish
/// (they detect the peer failure themselves), then SIGTERM, then SIGKILL after
/// options.kill_after_seconds. A job that goes on without a failed node (sync.strategy = ako, or
/// a BSP strategy with checkpoint.dir: README "When a peer fails") is left running after its
/// first failed node; a second failure starts the grace period. SIGINT and SIGTERM sent to the
/// launcher are forwarded to the nodes, with the same escalation. Blocks the calling thread;
/// installs libuv signal watchers for SIGINT and SIGTERM while it runs.
///
/// @returns 0 iff every node exited 0 and the launcher was not interrupted; 128 + the signal's
///          number if it was interrupted by SIGINT/SIGTERM; else 1. Whenever a node failed, a
///          summary naming each failed rank and its exit code or signal is printed to stderr.
/// @throws gradmesh::ConfigError before starting anything if N < 1, the config is missing or
///         invalid (its first error, as gradmesh-node would report it; with a node binary other
///         than gradmesh-node, which may register layer kinds of its own, unknown layer kinds
///         are left for its nodes to check), the node binary does
///         not exist or is not executable (naming the path), or the ports cannot be had.
[[nodiscard]] int run_launcher(const LaunchOptions& options);

}  // namespace gradmesh::app

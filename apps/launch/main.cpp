// gradmesh-launch: command-line front end of run_launcher() (apps/launch/launcher.h).
//
//   gradmesh-launch -n N --config JOB.toml [--metrics-out DIR] [--set K=V ...] [--resume DIR]
//                   [--node PATH]
//                   [--base-port P] [-v] [--all-ranks] [--log-dir DIR] [-- extra node args]

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/launch/launcher.h"
#include "engine/error.h"

int main(int argc, char** argv) {
  // Everything after the first "--" goes to the nodes verbatim.
  std::vector<const char*> own_args;
  gradmesh::app::LaunchOptions options;
  bool after_separator = false;
  for (int i = 0; i < argc; ++i) {
    if (after_separator) {
      options.node_args.emplace_back(argv[i]);
    } else if (i > 0 && std::string_view(argv[i]) == "--") {
      after_separator = true;
    } else {
      own_args.push_back(argv[i]);
    }
  }

  CLI::App app{
      "Starts N gradmesh-node processes on 127.0.0.1 with free ports and shows them as one "
      "console: a line every node prints once, warnings and errors with their ranks, one "
      "progress bar and one line per epoch for the job (--all-ranks: every node's lines, "
      "prefixed [r]). Exits non-zero if any node does.\n"
      "Arguments after \"--\" are passed to every node."};
  std::string config;
  std::string metrics_out;
  std::string node;
  std::string resume;
  app.add_option("-n,--nodes", options.nodes, "number of nodes to start (>= 1)")->required();
  app.add_option("--config", config, "job config (TOML), passed to every node")->required();
  app.add_option("--metrics-out", metrics_out,
                 "directory where each node writes node-<rank>.json (created if missing)");
  app.add_option("--set", options.overrides,
                 "override a config key, KEY=VALUE (repeatable), passed to every node")
      ->allow_extra_args(false);
  app.add_option("--resume", resume,
                 "every node continues from the newest checkpoint under DIR that all have "
                 "(checkpoint.dir of the run to continue)");
  app.add_option("--node", node,
                 "the gradmesh-node executable (default: gradmesh-node next to this program)");
  app.add_option("--base-port", options.base_port,
                 "use ports P..P+N-1 instead of free ports picked by the OS")
      ->check(CLI::Range(1, 65535));
  app.add_flag("-v,--verbose", options.verbose,
               "print each node's command line first, and relay every node's output as it comes");
  app.add_flag("--all-ranks", options.all_ranks,
               "relay every node's output as it comes, each line prefixed with its rank ([r] ...), "
               "instead of one merged console");
  std::string log_dir;
  app.add_option("--log-dir", log_dir,
                 "also write each node's whole output to DIR/node-<rank>.log");
  // For tests: shorter failure handling. Hidden (empty group).
  app.add_option("--grace-seconds", options.grace_seconds,
                 "after a node fails, seconds before the others get SIGTERM")
      ->group("");
  app.add_option("--kill-after-seconds", options.kill_after_seconds,
                 "seconds between SIGTERM and SIGKILL")
      ->group("");

  try {
    app.parse(static_cast<int>(own_args.size()), own_args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  options.config = config;
  if (!metrics_out.empty()) options.metrics_out = metrics_out;
  if (!resume.empty()) options.resume = resume;
  if (!log_dir.empty()) options.log_dir = log_dir;
  if (options.verbose) options.all_ranks = true;
  options.node_binary =
      node.empty() ? gradmesh::app::default_node_binary() : std::filesystem::path(node);

  // Our stdout may be a pipe whose reader quits; keep managing the nodes rather than die.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return gradmesh::app::run_launcher(options);
  } catch (const gradmesh::Error& e) {
    std::fprintf(stderr, "gradmesh-launch: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradmesh-launch: error: %s\n", e.what());
    return 2;
  }
}

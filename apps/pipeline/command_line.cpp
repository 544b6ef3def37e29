// parse_node_command_line and run_main (declared in pipeline.h): the command-line side of a node,
// shared by gradmesh-node and users' pipeline programs.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/pipeline/pipeline.h"
#include "apps/pipeline/progress.h"
#include "engine/error.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

CommandLine parse_node_command_line(int argc, const char* const* argv, std::string_view program) {
  CLI::App app{std::string(program) + ": one node of a gradmesh peer-to-peer training job"};
  app.set_version_flag("--version", std::string(program) + " (gradmesh 0.1.0)");
  NodeOptions node;
  std::string config;
  std::string metrics_out;
  std::string resume;
  app.add_option("--config", config, "job config (TOML); see configs/README.md")->required();
  app.add_option("--peers", node.peers,
                 "every node's HOST:PORT, comma-separated, in rank order (default: from SLURM's "
                 "or torchrun's variables if set, else one local node; README \"Launching\")");
  app.add_option("--peers-file", node.peers_file,
                 "file with one HOST:PORT per line, in rank order");
  app.add_option(
      "--rank", node.rank,
      "this node's rank (default: GRADMESH_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or RANK)");
  app.add_option("--set", node.overrides, "override a config key: KEY=VALUE (repeatable)")
      ->take_all();
  app.add_option("--metrics-out", metrics_out, "write DIR/node-<rank>.json at the end");
  app.add_option("--resume", resume,
                 "continue from the newest checkpoint under DIR that every node has (the "
                 "checkpoint.dir of the run to continue; README \"Checkpoints and resume\")");
  app.add_flag("--rejoin", node.rejoin,
               "this node restarted after it failed: take its place back in the running job "
               "(ako: at once, from a live peer's replica; a BSP strategy with checkpoint.dir: "
               "at the next checkpoint boundary, from that checkpoint; README \"When a peer "
               "fails\")");
  app.add_flag("--save-parameters", node.save_parameters,
               "also write the final parameters to DIR/parameters-<rank>.f32 (float32, raw)");
  app.add_flag("--trace", node.trace,
               "also write a Chrome trace of every task to DIR/trace-<rank>.json");
  app.add_flag("-v,--verbose", node.verbose, "debug logging; print the effective config");
  app.add_option("--progress", node.progress,
                 "progress between epoch lines: auto (a bar on a terminal, a plain line every 30 s "
                 "elsewhere), bar, line or none")
      ->check(CLI::IsMember({"auto", "bar", "line", "none"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);
    return CommandLine{std::nullopt, status == 0 ? 0 : 2};
  }
  node.config = config;
  if (!metrics_out.empty()) node.metrics_out = metrics_out;
  if (!resume.empty()) node.resume = resume;
  return CommandLine{std::move(node), 0};
}

namespace {

/// torchrun's error file: when TORCHELASTIC_ERROR_FILE names one, the error in the JSON that
/// torch.distributed.elastic's ErrorHandler writes ({"message": {"message": "<type>: <text>",
/// "extraInfo": {"py_callstack", "timestamp"}}}), so that torchrun's failure summary shows it
/// instead of "error_file: <N/A>". A file that cannot be written is logged, nothing more.
void write_torchelastic_error_file(std::string_view type, const std::string& text) noexcept {
  try {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path == nullptr || *path == '\0') return;
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const nlohmann::json data = {
        {"message",
         {{"message", std::string(type) + ": " + text},
          {"extraInfo",
           {{"py_callstack", "(gradmesh-node, C++: no Python call stack) " + text},
            {"timestamp", std::to_string(now)}}}}}};
    std::ofstream out(path);
    out << data.dump() << "\n";
    if (!out) spdlog::warn("cannot write TORCHELASTIC_ERROR_FILE '{}'", path);
  } catch (const std::exception& e) {
    spdlog::warn("cannot write TORCHELASTIC_ERROR_FILE: {}", e.what());
  }
}

}  // namespace

int run_main(const std::function<void()>& body) {
  apply_colour_policy(colour_allowed(::isatty(::fileno(stdout)) == 1, topo::process_environment()));
  // Under a launcher, errors raised before the Pipeline knows its rank (a bad config, a bad
  // --peers) carry the rank the launcher's variables give, so that its mixed stderr says which
  // node failed; the Pipeline sets the final pattern once its rank is resolved.
  try {
    const topo::RankChoice hint = topo::resolve_rank(std::nullopt, topo::process_environment(),
                                                     std::numeric_limits<std::size_t>::max());
    spdlog::set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(hint.rank) + "] [%^%l%$] %v");
  } catch (const ConfigError&) {
    // No launcher variable (or an unreadable one, reported when the Pipeline resolves it).
  }
  try {
    body();
    return 0;
  } catch (const ConfigError& e) {
    spdlog::error("configuration error: {}", e.what());
    write_torchelastic_error_file("ConfigError", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    write_torchelastic_error_file("Error", e.what());
    return 1;
  }
}

}  // namespace gradmesh::app

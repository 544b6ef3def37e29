// gradmesh-launch's checks before any node starts (the flags, the job config, the node binary,
// the output folders), then the nodes (local_nodes.h).

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "apps/config/job_config.h"
#include "apps/launch/launcher.h"
#include "apps/launch/local_nodes.h"
#include "engine/error.h"
#include "sync/compress/compressor.h"
#include "sync/sync_stage.h"
#include "tasks/layers/layer_registry.h"

namespace gradmesh::app {
namespace {

/// Creates `dir` (and its parents) if missing; a ConfigError naming `flag` if it cannot.
void create_folder(const std::filesystem::path& dir, const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(flag + " '" + dir.string() +
                      "': cannot create the directory: " + ec.message());
  }
}

void check_node_binary(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    throw ConfigError("node binary '" + path.string() +
                      "' does not exist: expected gradmesh-node built next to gradmesh-launch, or "
                      "--node PATH");
  }
  if (!std::filesystem::is_regular_file(status) || ::access(path.c_str(), X_OK) != 0) {
    throw ConfigError("node binary '" + path.string() + "' is not an executable file");
  }
}

}  // namespace

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(std::string_view message) {
  write_all(STDERR_FILENO, "gradmesh-launch: " + std::string(message) + "\n");
}

std::string signal_name(int signum) {
  const char* abbrev = ::sigabbrev_np(signum);
  return abbrev != nullptr ? "SIG" + std::string(abbrev) : "signal " + std::to_string(signum);
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::filesystem::path default_node_binary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "gradmesh-node";
  return self.parent_path() / "gradmesh-node";
}

int run_launcher(const LaunchOptions& options) {
  if (options.nodes < 1) {
    throw ConfigError("-n " + std::to_string(options.nodes) + ": expected a node count >= 1");
  }
  if (!(options.grace_seconds >= 0.0) || !(options.kill_after_seconds >= 0.0)) {
    throw ConfigError("grace and kill-after periods: expected seconds >= 0");
  }
  // Check the config here once, rather than have N nodes print the same error. A node program of
  // one's own (--node) may register layer kinds and compressors that only its nodes know
  // (tasks::register_layer, sync::compress::register_compressor): for such a program the launcher
  // checks every key but lets unknown layer kinds and compressor names through.
  JobConfig config;
  {
    std::optional<tasks::AcceptUnknownLayerKinds> user_kinds;
    std::optional<sync::compress::AcceptUnknownCompressors> user_compressors;
    if (options.node_binary.filename() != default_node_binary().filename()) {
      user_kinds.emplace();
      user_compressors.emplace();
    }
    config = load_job_config(options.config, options.overrides);
  }
  // Jobs that go on without a failed node (README "When a peer fails"): the launcher then lets
  // the others run after the first failure instead of stopping them after the grace period.
  std::string survivable;
  const sync::StrategyTraits& traits = sync::strategy_traits(config.sync.strategy);
  if (sync::goes_on_without_failed_peers(config.sync.strategy, config.sync.options)) {
    survivable = "sync.strategy = " + config.sync.strategy;
  } else if (traits.rolls_back && !config.checkpoint.dir.empty()) {
    survivable = "sync.strategy = " + config.sync.strategy + " rolls back to checkpoint.dir";
  }
  check_node_binary(options.node_binary);
  if (options.log_dir) create_folder(*options.log_dir, "--log-dir");
  if (options.metrics_out) create_folder(*options.metrics_out, "--metrics-out");
  std::vector<std::uint16_t> ports = pick_ports(options.nodes, options.base_port, options.host);
  return run_local_nodes(options, std::move(ports), std::move(survivable));
}

}  // namespace gradmesh::app

#pragma once
// Runs a small gradmesh job as real gradmesh-node processes on 127.0.0.1 (end-to-end tests).

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

namespace gradmesh::testing {

/// A job of `nodes` processes sharing one config file, each logging to dir/log-<rank>.txt and
/// writing metrics (and, with --save-parameters, parameters) to dir.
class Cluster {
 public:
  Cluster(std::string name, std::size_t nodes, const std::string& config_toml);

  /// The node program to start (default: gradmesh-node); call before start().
  void set_binary(std::string path) { binary_ = std::move(path); }

  /// Starts every node with `extra` arguments after the standard ones; `per_rank(rank)` may add
  /// rank-specific arguments.
  void start(const std::vector<std::string>& extra = {},
             const std::function<std::vector<std::string>(std::size_t)>& per_rank = nullptr);
  /// Starts rank `rank` again (its process must have ended: killed, say) with start()'s arguments
  /// and `more`; it logs to restarted_log(rank). process(rank) is then the new one.
  void restart(std::size_t rank, const std::vector<std::string>& more);
  [[nodiscard]] std::filesystem::path restarted_log(std::size_t rank) const;
  /// Waits (bounded) for every node; returns exit statuses (-1 for a node that timed out and was
  /// killed).
  std::vector<int> wait(std::chrono::seconds limit);

  [[nodiscard]] std::filesystem::path log(std::size_t rank) const;
  [[nodiscard]] std::string log_text(std::size_t rank) const { return read_file(log(rank)); }
  [[nodiscard]] nlohmann::json metrics(std::size_t rank) const;
  [[nodiscard]] std::vector<float> parameters(std::size_t rank) const;
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  [[nodiscard]] std::string address(std::size_t rank) const;
  [[nodiscard]] Process& process(std::size_t rank) { return processes_.at(rank); }
  [[nodiscard]] std::string all_logs() const;

 private:
  std::filesystem::path dir_;
  std::size_t nodes_;
  std::vector<int> ports_;
  std::vector<Process> processes_;
  std::vector<std::vector<std::string>> argv_;  // per rank, as start() ran it
  std::string binary_ = GRADMESH_NODE_BINARY;
};

}  // namespace gradmesh::testing

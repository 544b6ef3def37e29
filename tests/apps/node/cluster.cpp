#include "tests/apps/node/cluster.h"

#include <cstring>
#include <fstream>

namespace gradmesh::testing {

Cluster::Cluster(std::string name, std::size_t nodes, const std::string& config_toml)
    : dir_(fresh_directory(name)), nodes_(nodes), ports_(free_ports(nodes)) {
  std::ofstream(dir_ / "job.toml") << config_toml;
}

std::string Cluster::address(std::size_t rank) const {
  return "127.0.0.1:" + std::to_string(ports_.at(rank));
}

void Cluster::start(const std::vector<std::string>& extra,
                    const std::function<std::vector<std::string>(std::size_t)>& per_rank) {
  std::string peers;
  for (std::size_t r = 0; r < nodes_; ++r) peers += (r ? "," : "") + address(r);
  for (std::size_t r = 0; r < nodes_; ++r) {
    std::vector<std::string> argv = {
        binary_,           "--config",      (dir_ / "job.toml").string(),
        "--peers",         peers,           "--rank",
        std::to_string(r), "--metrics-out", dir_.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (per_rank) {
      const auto more = per_rank(r);
      argv.insert(argv.end(), more.begin(), more.end());
    }
    processes_.emplace_back(argv, log(r));
    argv_.push_back(std::move(argv));
  }
}

void Cluster::restart(std::size_t rank, const std::vector<std::string>& more) {
  std::vector<std::string> argv = argv_.at(rank);
  argv.insert(argv.end(), more.begin(), more.end());
  processes_.at(rank) = Process(argv, restarted_log(rank));  // the old one is reaped
}

std::filesystem::path Cluster::restarted_log(std::size_t rank) const {
  return dir_ / ("log-" + std::to_string(rank) + "-restarted.txt");
}

std::vector<int> Cluster::wait(std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int> codes;
  for (Process& p : processes_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const auto code = p.wait_for(std::max(left, std::chrono::milliseconds(0)));
    if (!code) p.kill_now();
    codes.push_back(code.value_or(-1));
  }
  return codes;
}

std::filesystem::path Cluster::log(std::size_t rank) const {
  return dir_ / ("log-" + std::to_string(rank) + ".txt");
}

nlohmann::json Cluster::metrics(std::size_t rank) const {
  return nlohmann::json::parse(read_file(dir_ / ("node-" + std::to_string(rank) + ".json")));
}

std::vector<float> Cluster::parameters(std::size_t rank) const {
  const std::string bytes = read_file(dir_ / ("parameters-" + std::to_string(rank) + ".f32"));
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::string Cluster::all_logs() const {
  std::string out;
  for (std::size_t r = 0; r < nodes_; ++r)
    out += "--- rank " + std::to_string(r) + "\n" + log_text(r);
  return out;
}

}  // namespace gradmesh::testing

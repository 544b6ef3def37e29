// End-to-end tests of peers and ranks taken from a launcher's environment
// (topo/launch_environment.h): two real gradmesh-node processes on loopback, started without
// --peers or --rank, as srun or torchrun would start them.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/process.h"
#include "tests/support/small_job.h"

namespace fs = std::filesystem;
using gradmesh::testing::Process;
using gradmesh::testing::read_file;

namespace {

const std::string kConfig = gradmesh::testing::small_job_toml(
    "launch-env", {"job.max_iterations = 5", "data.test_limit = 100"});

/// Whether TCP port `port` on `host` (an IPv4 literal) can be bound now.
bool bindable(const char* host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, host, &addr.sin_addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

/// A port P with P+1..P+count free on 127.0.0.1 a moment ago.
int base_of_free_ports(int count) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int base = gradmesh::testing::free_ports(1).front();
    bool all = base + count <= 65535;
    for (int i = 1; all && i <= count; ++i) all = bindable("127.0.0.1", base + i);
    if (all) return base;
  }
  FAIL("no run of free ports found on 127.0.0.1");
  return 0;
}

/// Runs 2 nodes, rank r with the environment `env(r)` (through /usr/bin/env); checks that both
/// finish, train as 2 nodes and say where their peers came from.
void run_two_nodes(const std::string& name, const std::vector<std::string>& extra,
                   const std::function<std::vector<std::string>(int)>& env,
                   const std::string& peers_from) {
  const fs::path dir = gradmesh::testing::fresh_directory(name);
  std::ofstream(dir / "job.toml") << kConfig;
  std::vector<Process> nodes;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    for (const std::string& v : env(r)) argv.push_back(v);
    for (const std::string& a :
         {std::string(GRADMESH_NODE_BINARY), std::string("--config"), (dir / "job.toml").string(),
          std::string("--metrics-out"), dir.string()}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    nodes.emplace_back(argv, dir / ("log-" + std::to_string(r) + ".txt"));
  }
  for (int r = 0; r < 2; ++r) {
    const auto code = nodes[r].wait_for(std::chrono::seconds(60));
    if (!code) nodes[r].kill_now();
    const std::string log = read_file(dir / ("log-" + std::to_string(r) + ".txt"));
    INFO(log);
    CHECK(code == 0);
    CHECK_THAT(log, Catch::Contains("[rank " + std::to_string(r) +
                                    "] [info] job 'launch-env': "
                                    "strategy ") &&
                        Catch::Contains("2 node(s), rank from "));
    CHECK_THAT(log, Catch::Contains("peers from " + peers_from));
    CHECK(fs::exists(dir / ("node-" + std::to_string(r) + ".json")));
  }
}

}  // namespace

TEST_CASE(
    "nodes started as srun starts them take peers from the node list, rank from "
    "SLURM_PROCID",
    "[e2e][launch]") {
  // Two hosts, 127.0.0.1 and 127.0.0.2 (both loopback on Linux), one node each on net.port.
  const int port = gradmesh::testing::free_ports(1).front();
  if (!bindable("127.0.0.2", port)) {
    WARN("skipped: port " << port << " of 127.0.0.2 cannot be bound on this machine");
    return;
  }
  run_two_nodes(
      "launch-slurm", {"--set", "net.port=" + std::to_string(port)},
      [](int r) {
        return std::vector<std::string>{"SLURM_JOB_NODELIST=127.0.0.[1-2]", "SLURM_NTASKS=2",
                                        "SLURM_PROCID=" + std::to_string(r)};
      },
      "SLURM_JOB_NODELIST='127.0.0.[1-2]'");
}

TEST_CASE("nodes started with torchrun's variables run on MASTER_ADDR, rank from RANK",
          "[e2e][launch]") {
  const int master_port = base_of_free_ports(2);
  run_two_nodes(
      "launch-torchrun", {},
      [master_port](int r) {
        return std::vector<std::string>{"MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(master_port),
                                        "WORLD_SIZE=2", "RANK=" + std::to_string(r)};
      },
      "MASTER_ADDR='127.0.0.1'");
}

TEST_CASE("nodes started as mpirun starts them on one host run as one job, rank from the MPI rank",
          "[e2e][launch]") {
  // Open MPI's variables for 2 processes on this host: ports net.port and net.port + 1.
  const int port = base_of_free_ports(2) + 1;
  run_two_nodes(
      "launch-mpi", {"--set", "net.port=" + std::to_string(port)},
      [](int r) {
        return std::vector<std::string>{"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                        "OMPI_COMM_WORLD_RANK=" + std::to_string(r)};
      },
      "OMPI_COMM_WORLD_SIZE=2 on one host");
}

TEST_CASE("a node that fails under torchrun writes torchrun's error file, its log lines ranked",
          "[e2e][launch]") {
  const fs::path dir = gradmesh::testing::fresh_directory("launch-torchrun-error");
  std::ofstream(dir / "job.toml") << kConfig;
  const fs::path error_file = dir / "error.json";
  Process node({"/usr/bin/env", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29400", "WORLD_SIZE=2",
                "RANK=1", "TORCHELASTIC_ERROR_FILE=" + error_file.string(), GRADMESH_NODE_BINARY,
                "--config", (dir / "job.toml").string(), "--set", "optimizer.lrr=0.1"},
               dir / "log.txt");
  const auto code = node.wait_for(std::chrono::seconds(30));
  if (!code) node.kill_now();
  const std::string log = read_file(dir / "log.txt");
  INFO(log);
  CHECK(code == 2);
  // The config is read before the peers: the rank comes from RANK.
  CHECK_THAT(log, Catch::Contains("[rank 1] [error] configuration error: ") &&
                      Catch::Contains("optimizer.lrr"));
  REQUIRE(fs::exists(error_file));
  const auto json = nlohmann::json::parse(read_file(error_file));
  const std::string message = json.at("message").at("message");
  CHECK_THAT(message, Catch::StartsWith("ConfigError: ") && Catch::Contains("optimizer.lrr"));
  const std::string timestamp = json.at("message").at("extraInfo").at("timestamp");
  CHECK(std::stoll(timestamp) > 1'600'000'000);
}

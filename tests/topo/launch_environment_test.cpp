#include "topo/launch_environment.h"

#include <map>
#include <string>
#include <tuple>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::ConfigError;
using gradmesh::topo::launch_environment;

namespace {

/// An environment as a map, looked up like the process environment.
struct FakeEnvironment {
  std::map<std::string, std::string> variables;
  /// launch_environment() of these variables, net.port `port`, --rank `cli_rank`.
  [[nodiscard]] std::optional<gradmesh::topo::LaunchEnvironment> launch(
      std::uint16_t port = 29500, std::optional<long long> cli_rank = std::nullopt) const {
    const auto lookup = [this](std::string_view name) -> std::optional<std::string> {
      const auto it = variables.find(std::string(name));
      if (it == variables.end()) return std::nullopt;
      return it->second;
    };
    return launch_environment(lookup, port, cli_rank);
  }
};

}  // namespace

TEST_CASE("no launcher variables: no launch environment", "[topo][launch]") {
  FakeEnvironment env;
  CHECK_FALSE(env.launch());
  env.variables["SLURM_PROCID"] = "1";  // a rank alone gives no peers
  CHECK_FALSE(env.launch());
}

TEST_CASE("SLURM: one node per host of the node list, port from the config, SLURM_PROCID",
          "[topo][launch]") {
  FakeEnvironment env;
  env.variables = {{"SLURM_JOB_NODELIST", "node[01-03,07]"},
                   {"SLURM_PROCID", "2"},
                   {"SLURM_NTASKS", "4"},
                   {"RANK", "0"}};
  const auto launched = env.launch(29600);
  REQUIRE(launched);
  CHECK(launched->peers.to_string() == "node01:29600,node02:29600,node03:29600,node07:29600");
  CHECK(launched->rank.rank == 2);
  CHECK(launched->rank.source == "SLURM_PROCID");
  CHECK_THAT(launched->source, Catch::Contains("SLURM_JOB_NODELIST='node[01-03,07]'") &&
                                   Catch::Contains("port 29600 from net.port"));
  CHECK(env.launch(29600, 3)->rank.source == "--rank");

  // A step's own node list wins over the job's; SLURM_NODELIST is the older name.
  env.variables["SLURM_STEP_NODELIST"] = "node[01-02]";
  env.variables["SLURM_STEP_NUM_TASKS"] = "2";
  env.variables["SLURM_PROCID"] = "1";
  CHECK(env.launch(29600)->peers.size() == 2);
  env.variables = {{"SLURM_NODELIST", "a1,b[1-2]"}, {"SLURM_PROCID", "0"}};
  CHECK(env.launch(1)->peers.to_string() == "a1:1,b1:1,b2:1");
}

TEST_CASE("SLURM errors name the variable and its value", "[topo][launch]") {
  FakeEnvironment env;
  env.variables = {
      {"SLURM_JOB_NODELIST", "node[01-02]"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}};
  CHECK_THROWS_WITH(env.launch(), Catch::Contains("SLURM_NTASKS='4'") &&
                                      Catch::Contains("names 2 host(s)") &&
                                      Catch::Contains("--ntasks-per-node=1"));
  env.variables.erase("SLURM_NTASKS");
  env.variables.erase("SLURM_PROCID");
  CHECK_THROWS_WITH(env.launch(), Catch::Contains("no rank") && Catch::Contains("SLURM_PROCID"));
  env.variables["SLURM_PROCID"] = "2";
  CHECK_THROWS_WITH(env.launch(), Catch::Contains("SLURM_PROCID = 2") && Catch::Contains("0..1"));
  env.variables["SLURM_PROCID"] = "x";
  CHECK_THROWS_WITH(env.launch(), Catch::Contains("SLURM_PROCID='x'"));
  env.variables["SLURM_JOB_NODELIST"] = "node[01-02";
  CHECK_THROWS_WITH(env.launch(), Catch::StartsWith("SLURM_JOB_NODELIST='node[01-02'"));
  env.variables["SLURM_JOB_NODELIST"] = "a,a";
  env.variables["SLURM_PROCID"] = "0";
  CHECK_THROWS_WITH(env.launch(),
                    Catch::StartsWith("SLURM_JOB_NODELIST='a,a'") && Catch::Contains("twice"));
}

TEST_CASE("torchrun-style: every rank on MASTER_ADDR, ports after MASTER_PORT, RANK",
          "[topo][launch]") {
  FakeEnvironment env;
  env.variables = {{"MASTER_ADDR", "10.0.0.5"},
                   {"MASTER_PORT", "29500"},
                   {"WORLD_SIZE", "3"},
                   {"RANK", "1"},
                   {"SLURM_PROCID", "0"}};
  const auto launched = env.launch(1234);
  REQUIRE(launched);
  CHECK(launched->peers.to_string() == "10.0.0.5:29501,10.0.0.5:29502,10.0.0.5:29503");
  CHECK(launched->rank.rank == 1);
  CHECK(launched->rank.source == "RANK");
  CHECK_THAT(launched->source, Catch::Contains("MASTER_ADDR='10.0.0.5'"));

  // A torchrun worker (TORCHELASTIC_RUN_ID) inside a SLURM job: torchrun's variables win.
  env.variables["SLURM_JOB_NODELIST"] = "node[01-04]";
  CHECK(env.launch(1234)->peers.size() == 4);
  env.variables["TORCHELASTIC_RUN_ID"] = "job7";
  env.variables["LOCAL_WORLD_SIZE"] = "3";
  env.variables["GROUP_WORLD_SIZE"] = "1";
  CHECK(env.launch(1234)->peers.size() == 3);
}

TEST_CASE("torchrun-style errors name the variable, several hosts are refused", "[topo][launch]") {
  FakeEnvironment env;
  env.variables = {{"MASTER_ADDR", "h"}, {"WORLD_SIZE", "2"}, {"RANK", "0"}};
  CHECK_THROWS_WITH(env.launch(1), Catch::StartsWith("MASTER_PORT is not set"));
  env.variables["MASTER_PORT"] = "port";
  CHECK_THROWS_WITH(env.launch(1),
                    Catch::StartsWith("MASTER_PORT='port': expected an integer in 1..65535"));
  env.variables["MASTER_PORT"] = "65535";
  CHECK_THROWS_WITH(env.launch(1), Catch::Contains("pass 65535"));
  env.variables["MASTER_PORT"] = "29500";
  env.variables["WORLD_SIZE"] = "0";
  CHECK_THROWS_WITH(env.launch(1), Catch::StartsWith("WORLD_SIZE='0'"));
  env.variables["WORLD_SIZE"] = "8";
  env.variables["LOCAL_WORLD_SIZE"] = "4";
  CHECK_THROWS_WITH(env.launch(1),
                    Catch::StartsWith("LOCAL_WORLD_SIZE='4' differs from WORLD_SIZE='8'") &&
                        Catch::Contains("several hosts") && Catch::Contains("--peers"));
  env.variables.erase("LOCAL_WORLD_SIZE");
  env.variables["GROUP_WORLD_SIZE"] = "2";
  CHECK_THROWS_WITH(env.launch(1), Catch::StartsWith("GROUP_WORLD_SIZE='2'"));
  env.variables = {{"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}, {"RANK", "0"}};
  CHECK_THROWS_WITH(env.launch(1), Catch::StartsWith("MASTER_ADDR is not set"));
  env.variables = {{"MASTER_ADDR", "h"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}};
  CHECK_THROWS_WITH(env.launch(1), Catch::Contains("no rank: pass --rank R or set RANK"));
}

TEST_CASE("MPI on one host: rank r on 127.0.0.1:(net.port + r), the MPI rank", "[topo][launch]") {
  for (const auto& [size, rank, local] :
       {std::tuple{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        std::tuple{"PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"}}) {
    INFO(size);
    FakeEnvironment env;
    env.variables = {{size, "3"}, {rank, "2"}, {local, "3"}};
    const auto launch = env.launch(29600);
    REQUIRE(launch);
    REQUIRE(launch->peers.size() == 3);
    CHECK(launch->peers[0].host == "127.0.0.1");
    CHECK(launch->peers[0].port == 29600);
    CHECK(launch->peers[2].port == 29602);
    CHECK(launch->rank.rank == 2);
    CHECK_THAT(launch->source, Catch::Contains(std::string(size) + "=3 on one host"));
    // One process: a one-node job, as without a launcher.
    FakeEnvironment one;
    one.variables = {{size, "1"}, {rank, "0"}};
    CHECK_FALSE(one.launch());
  }
}

TEST_CASE("MPI on several hosts, or with no local size, is refused: never n one-node jobs",
          "[topo][launch]") {
  FakeEnvironment several;
  several.variables = {{"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  CHECK_THROWS_WITH(several.launch(), Catch::StartsWith("OMPI_COMM_WORLD_SIZE='4' but "
                                                        "OMPI_COMM_WORLD_LOCAL_SIZE='2'") &&
                                          Catch::Contains("--peers HOST:PORT") &&
                                          Catch::Contains("train alone"));
  FakeEnvironment unknown;
  unknown.variables = {{"PMI_SIZE", "2"}, {"PMI_RANK", "0"}};
  CHECK_THROWS_WITH(unknown.launch(), Catch::StartsWith("PMI_SIZE='2': an MPI launch of 2"));
}

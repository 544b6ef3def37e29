#include "topo/launch_environment.h"

#include <charconv>
#include <initializer_list>
#include <vector>

#include "engine/error.h"
#include "topo/hostlist.h"

namespace gradmesh::topo {

namespace {

/// An environment variable that is set.
struct Variable {
  std::string name;
  std::string value;
};

/// The first of `names` that is set; nullopt if none is.
std::optional<Variable> first_set(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = env(name)) return Variable{name, std::move(*value)};
  }
  return std::nullopt;
}

/// The integer value of `variable`, which must be set and lie in [min, max].
long long integer(const EnvLookup& env, const char* variable, long long min, long long max,
                  const std::string& why) {
  const auto text = env(variable);
  if (!text) throw ConfigError(std::string(variable) + " is not set: " + why);
  long long value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < min || value > max) {
    throw ConfigError(std::string(variable) + "='" + *text + "': expected an integer in " +
                      std::to_string(min) + ".." + std::to_string(max) + " (" + why + ")");
  }
  return value;
}

LaunchEnvironment from_torchrun(const EnvLookup& env, std::optional<long long> cli_rank) {
  const std::string why = "torchrun-style launch needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK";
  const auto master = env("MASTER_ADDR");
  if (!master) throw ConfigError("MASTER_ADDR is not set: " + why);
  const long long world = integer(env, "WORLD_SIZE", 1, 65535, why);
  const long long master_port = integer(env, "MASTER_PORT", 1, 65535, why);
  const std::string several_hosts =
      ": the peers run on several hosts, whose addresses are not in a torchrun environment; "
      "start gradmesh-node with srun (SLURM), --peers or --peers-file instead";
  if (const auto local = env("LOCAL_WORLD_SIZE"); local && *local != std::to_string(world)) {
    throw ConfigError("LOCAL_WORLD_SIZE='" + *local + "' differs from WORLD_SIZE='" +
                      std::to_string(world) + "'" + several_hosts);
  }
  if (const auto groups = env("GROUP_WORLD_SIZE"); groups && *groups != "1") {
    throw ConfigError("GROUP_WORLD_SIZE='" + *groups + "' (expected 1)" + several_hosts);
  }
  if (master_port + world > 65535) {
    throw ConfigError("MASTER_PORT='" + std::to_string(master_port) + "' with WORLD_SIZE='" +
                      std::to_string(world) +
                      "': the ports MASTER_PORT+1..MASTER_PORT+WORLD_SIZE "
                      "pass 65535");
  }
  std::vector<Peer> peers;
  for (long long r = 0; r < world; ++r) {
    peers.push_back(Peer{*master, static_cast<std::uint16_t>(master_port + 1 + r)});
  }
  LaunchEnvironment out;
  out.peers = PeerList(std::move(peers));
  out.rank = resolve_rank(cli_rank, env, out.peers.size(), {"RANK"});
  out.source = "MASTER_ADDR='" + *master + "', WORLD_SIZE=" + std::to_string(world) +
               " (rank r on MASTER_PORT + 1 + r: ports " + std::to_string(master_port + 1) + ".." +
               std::to_string(master_port + world) + ")";
  return out;
}

LaunchEnvironment from_slurm(const EnvLookup& env, const Variable& nodelist, std::uint16_t port,
                             std::optional<long long> cli_rank) {
  const std::vector<std::string> hosts = expand_hostlist(nodelist.value, nodelist.name);
  if (const auto tasks = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
      tasks && tasks->value != std::to_string(hosts.size())) {
    throw ConfigError(tasks->name + "='" + tasks->value + "' but " + nodelist.name + "='" +
                      nodelist.value + "' names " + std::to_string(hosts.size()) +
                      " host(s): gradmesh runs one node per host (srun --ntasks-per-node=1)");
  }
  std::vector<Peer> peers;
  for (const std::string& host : hosts) peers.push_back(Peer{host, port});
  LaunchEnvironment out;
  try {
    out.peers = PeerList(std::move(peers));
  } catch (const ConfigError& e) {  // a host listed twice
    throw ConfigError(nodelist.name + "='" + nodelist.value + "': " + e.what());
  }
  out.rank = resolve_rank(cli_rank, env, out.peers.size(), {"SLURM_PROCID"});
  out.source = nodelist.name + "='" + nodelist.value + "' (" + std::to_string(hosts.size()) +
               " host(s), port " + std::to_string(port) + " from net.port)";
  return out;
}

/// An MPI launcher's processes (issue 30: "mpirun -np 2 gradmesh-node --config ... without
/// --peers silently runs two independent one-node jobs"). Open MPI: OMPI_COMM_WORLD_SIZE,
/// _RANK, _LOCAL_SIZE; MPICH / Intel MPI (Hydra): PMI_SIZE, PMI_RANK, MPI_LOCALNRANKS.
std::optional<LaunchEnvironment> from_mpi(const EnvLookup& env, std::uint16_t port,
                                          std::optional<long long> cli_rank) {
  struct Names {
    const char* size;
    const char* rank;
    const char* local_size;
  };
  for (const Names& n :
       {Names{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        Names{"PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"}}) {
    if (!env(n.size)) continue;
    const std::string why = "an MPI launch gives the job's size and this process's rank";
    const long long size = integer(env, n.size, 1, 65535, why);
    if (size == 1) return std::nullopt;  // one process: a one-node job, as without a launcher
    const auto local = env(n.local_size);
    if (!local || *local != std::to_string(size)) {
      throw ConfigError(
          std::string(n.size) + "='" + std::to_string(size) + "'" +
          (local ? std::string(" but ") + n.local_size + "='" + *local + "'" : std::string()) +
          ": an MPI launch of " + std::to_string(size) +
          " processes on several hosts (or hosts not known), whose addresses are not in its "
          "environment; pass the same --peers HOST:PORT,... or --peers-file FILE to every "
          "rank, or launch with srun (SLURM). Without them each process would train alone");
    }
    if (port + size - 1 > 65535) {
      throw ConfigError(std::string(n.size) + "='" + std::to_string(size) + "' with net.port " +
                        std::to_string(port) + ": the ports net.port..net.port+" +
                        std::to_string(size - 1) + " pass 65535");
    }
    std::vector<Peer> peers;
    for (long long r = 0; r < size; ++r) {
      peers.push_back(Peer{"127.0.0.1", static_cast<std::uint16_t>(port + r)});
    }
    LaunchEnvironment out;
    out.peers = PeerList(std::move(peers));
    out.rank = resolve_rank(cli_rank, env, out.peers.size(), {n.rank});
    out.source = std::string(n.size) + "=" + std::to_string(size) + " on one host (" +
                 n.local_size + "): rank r on 127.0.0.1:(net.port + r), ports " +
                 std::to_string(port) + ".." + std::to_string(port + size - 1);
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::optional<LaunchEnvironment> launch_environment(const EnvLookup& env, std::uint16_t port,
                                                    std::optional<long long> cli_rank) {
  const auto nodelist =
      first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (env("TORCHELASTIC_RUN_ID")) return from_torchrun(env, cli_rank);
  if (nodelist) return from_slurm(env, *nodelist, port, cli_rank);
  if (env("MASTER_ADDR") || env("WORLD_SIZE")) return from_torchrun(env, cli_rank);
  return from_mpi(env, port, cli_rank);
}

}  // namespace gradmesh::topo

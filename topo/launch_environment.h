#pragma once
// The peer list and this node's rank from a launcher's environment (SLURM's srun, torchrun or a
// torchrun-style script, mpirun on one host), for nodes started without --peers / --peers-file
// (README "Launching").

#include <cstdint>
#include <optional>
#include <string>

#include "topo/peer_list.h"

namespace gradmesh::topo {

/// A job's peers and this node's rank as a launcher's environment gives them.
struct LaunchEnvironment {
  PeerList peers;
  RankChoice rank;
  /// Where the peers came from, for the start-up message, e.g.
  /// "SLURM_STEP_NODELIST='node[01-02]' (2 hosts, port 29500 from net.port)".
  std::string source;
};

/// Reads the peer list and rank from `env`, or returns nullopt when no launcher's variables are
/// set. Checked in this order:
///
/// 1. **torchrun** (`TORCHELASTIC_RUN_ID` is set: this process is a torchrun worker, whatever
///    SLURM says) and **torchrun-style** (`MASTER_ADDR` or `WORLD_SIZE` set, no SLURM node list):
///    needs `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` and `RANK`. All ranks run on MASTER_ADDR's
///    host; rank r listens on MASTER_ADDR:(MASTER_PORT + 1 + r) (MASTER_PORT itself may be
///    torchrun's own rendezvous store). Rank from `RANK`. Several hosts cannot be derived (their
///    addresses are not in the environment): `LOCAL_WORLD_SIZE` != `WORLD_SIZE` or
///    `GROUP_WORLD_SIZE` > 1 is an error that says to use SLURM, --peers or --peers-file.
/// 2. **SLURM** (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`, else `SLURM_NODELIST`): one
///    node per host of the list (expand_hostlist), each on HOST:`port` (net.port), rank from
///    `SLURM_PROCID`. The step's task count (`SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS`), when
///    set, must equal the number of hosts (srun --ntasks-per-node=1).
/// 3. **MPI** (mpirun / mpiexec: Open MPI's `OMPI_COMM_WORLD_SIZE`, `_RANK`, `_LOCAL_SIZE`, else
///    Hydra's (MPICH, Intel MPI) `PMI_SIZE`, `PMI_RANK`, `MPI_LOCALNRANKS`): a size of 1 is a
///    one-node job; every process on one host (the local size equals the size) gives rank r on
///    127.0.0.1:(`port` + r), rank from the MPI rank; several hosts (or no local size) are an
///    error naming the variables and saying to pass --peers / --peers-file or use srun — never
///    n independent one-node jobs.
///
/// `cli_rank` (--rank), when given, overrides the environment's rank. Throws ConfigError naming
/// the variable and its value when one is missing, malformed or inconsistent, or the rank is out
/// of range.
[[nodiscard]] std::optional<LaunchEnvironment> launch_environment(
    const EnvLookup& env, std::uint16_t port, std::optional<long long> cli_rank);

}  // namespace gradmesh::topo

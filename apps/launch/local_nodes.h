#pragma once
// Internal to gradmesh_launcher: the local node processes of one job, once run_launcher()
// (launch_job.cpp) has checked what it can before starting them.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "apps/launch/launcher.h"

namespace gradmesh::app {

/// Starts options.nodes gradmesh-node processes (options.node_binary) on `ports` (one a rank),
/// relays their output (merged with a progress bar, or prefixed by rank), passes signals on,
/// stops the others after a failure unless the job is `survivable` (why it goes on without a
/// failed node; empty: it does not), and returns the job's exit status (run_launcher()'s
/// contract). Blocks until every node has exited. Not thread-safe (one per process: it handles
/// SIGINT and SIGTERM).
int run_local_nodes(const LaunchOptions& options, std::vector<std::uint16_t> ports,
                    std::string survivable);

/// Writes all of `data` to `fd`, retrying on EINTR and short writes; drops it if the reader
/// went away (EPIPE) or another error occurs: the launcher must keep managing its nodes.
void write_all(int fd, std::string_view data);
/// The launcher's own message on stderr: "gradmesh-launch: <message>".
void say(std::string_view message);
/// "SIGTERM", or "signal N" for a number without a name.
[[nodiscard]] std::string signal_name(int signum);
/// `items` joined by `separator`.
[[nodiscard]] std::string join(const std::vector<std::string>& items, std::string_view separator);

}  // namespace gradmesh::app

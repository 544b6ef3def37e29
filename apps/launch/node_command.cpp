// The job's layout as gradmesh-launch starts it: a port per node (free ones, or from --base-port)
// and each node's command line.
#include "apps/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace gradmesh::app {

std::vector<std::uint16_t> pick_ports(std::size_t n, std::uint16_t base_port,
                                      const std::string& host) {
  std::vector<std::uint16_t> ports;
  if (base_port != 0) {
    if (base_port + n - 1 > 65535) {
      throw ConfigError("--base-port " + std::to_string(base_port) + " with " + std::to_string(n) +
                        " nodes: expected base_port + N - 1 <= 65535");
    }
    for (std::size_t i = 0; i < n; ++i) ports.push_back(static_cast<std::uint16_t>(base_port + i));
    return ports;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw ConfigError("host '" + host + "': expected an IPv4 address such as 127.0.0.1");
  }
  std::vector<int> fds;
  auto close_all = [&fds] {
    for (const int fd : fds) ::close(fd);
  };
  for (std::size_t i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in bound{};
    socklen_t len = sizeof(bound);
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      close_all();
      throw ConfigError("cannot find a free port on " + host + ": " + why);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(bound.sin_port));
  }
  close_all();
  return ports;
}

std::vector<std::string> node_command(const LaunchOptions& options,
                                      const std::vector<std::uint16_t>& ports, std::size_t rank) {
  std::string peers;
  for (const std::uint16_t port : ports) {
    peers += (peers.empty() ? "" : ",") + options.host + ":" + std::to_string(port);
  }
  std::vector<std::string> args{
      options.node_binary.string(), "--config", options.config.string(), "--peers", peers, "--rank",
      std::to_string(rank)};
  if (options.metrics_out) {
    args.push_back("--metrics-out");
    args.push_back(options.metrics_out->string());
  }
  for (const std::string& o : options.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  if (options.resume) {
    args.push_back("--resume");
    args.push_back(options.resume->string());
  }
  args.insert(args.end(), options.node_args.begin(), options.node_args.end());
  return args;
}

}  // namespace gradmesh::app

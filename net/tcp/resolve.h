#pragma once
// Internal to net/tcp/: a peer's host name to every address it has (start() only).

#include <sys/socket.h>

#include <cstddef>
#include <string>
#include <vector>

#include "net/endpoint.h"
#include "net/transport_options.h"

namespace gradmesh::net::tcp {

/// One address of a peer's host, with its port: what a dialer connects to and a listener binds.
struct ResolvedAddress {
  sockaddr_storage socket_address{};
  std::string text;  ///< "127.0.0.1:4000" or "[::1]:4000": named in errors
};

/// "127.0.0.1:4000" or "[::1]:4000" for an AF_INET or AF_INET6 address with its port.
[[nodiscard]] std::string address_text(const sockaddr_storage& storage);

/// "127.0.0.1" or "::1": the IP address alone of an AF_INET or AF_INET6 address.
[[nodiscard]] std::string ip_text(const sockaddr_storage& storage);

/// Every address of `endpoint.host` (port `endpoint.port`), in the order to try, without
/// duplicates. With no `resolver`: getaddrinfo(AF_UNSPEC, SOCK_STREAM, AI_ADDRCONFIG off), whose
/// order is RFC 6724's destination address selection (glibc sorts by it: on a standard Debian
/// `localhost` gives ::1, then 127.0.0.1). With one: its IP literals, in its order.
/// Blocking; called on start()'s thread. Throws gradmesh::PeerError(rank, endpoint) naming the
/// host and why when there is no address (unknown host, a resolver that throws or returns
/// nothing or a literal that is not an IP address).
[[nodiscard]] std::vector<ResolvedAddress> resolve_all(std::size_t rank, const Endpoint& endpoint,
                                                       const Resolver& resolver);

}  // namespace gradmesh::net::tcp

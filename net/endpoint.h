#pragma once
// A peer's listening address.

#include <cstdint>
#include <string>

namespace gradmesh::net {

/// Where a rank listens: a host name or IP literal and a TCP port. Plain value type.
struct Endpoint {
  std::string host;        ///< host name or IPv4/IPv6 literal, e.g. "127.0.0.1"
  std::uint16_t port = 0;  ///< TCP port

  /// "host:port" (IPv6 literals are bracketed: "[::1]:4000"). Used in the handshake's peer list and
  /// in every PeerError, so two nodes agree on a peer list iff these strings agree.
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

/// Parses "host:port" or "[v6]:port". Throws gradmesh::ConfigError naming the text when the port
/// is missing, not a number or out of 1..65535.
[[nodiscard]] Endpoint parse_endpoint(const std::string& text);

}  // namespace gradmesh::net

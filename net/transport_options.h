#pragma once
// Configuration of a Transport.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net/endpoint.h"

namespace gradmesh::net {

/// Maps a host name to the IP literals ("127.0.0.1", "::1") to use for it, in the order to try.
/// Called by TcpTransport::start() on its caller's thread, once per peer-list entry; may throw
/// (a resolution failure naming the host). Unset: the system's resolver (getaddrinfo).
using Resolver = std::function<std::vector<std::string>(const std::string& host)>;

/// Everything a Transport needs; plain struct, validated by the Transport constructor
/// (throws gradmesh::ConfigError naming the field, the value and what was expected).
struct TransportOptions {
  std::size_t rank = 0;           ///< this node's index into `peers`
  std::vector<Endpoint> peers;    ///< index = rank; includes this node; >= 1 entry
  std::string job_name;           ///< must match on every peer (handshake)
  std::uint64_t config_hash = 0;  ///< must match on every peer (handshake)
  /// The config behind config_hash as "key = value" lines (JobConfig::key_text()), sent in the
  /// Hello so that a refusal for a differing hash names each key that differs and both values.
  /// Empty: the refusal gives the two hashes only.
  std::string config_text;
  double connect_timeout_s = 30.0;  ///< seconds start() dials/waits before failing; > 0
  /// Seconds an accepted connection may take from its accept to a finished handshake (the Hello
  /// taken) before it is closed and counted as rejected: a stranger cannot hold a connection
  /// open by sending nothing, or half a frame. > 0, finite. The accepted connections still in
  /// their handshake are also capped (2 x peers + 64 in all, peers + 16 from one IP address):
  /// one past a cap is closed at once.
  double handshake_timeout_s = 5.0;
  std::size_t max_frame_bytes =
      1ull << 30;                  ///< prefix + header + payload; larger frames are protocol errors
  std::vector<std::string> lanes;  ///< byte-counter lane names, lane id = index (< 255);
                                   ///< "control" (handshake, goodbye) is appended by the transport
  double max_send_rate = 0.0;      ///< bytes/s over all peers; 0 = unlimited (token bucket)
  /// Seconds an established peer may stay silent (not a byte read from it) before it is failed
  /// as hung or unreachable; every connection that has carried nothing for a quarter of this gets
  /// a Heartbeat frame, so only a peer that stopped (SIGSTOP, a frozen host, a cut link) falls
  /// silent. 0: no heartbeats, a peer fails only when its connection breaks. >= 0, finite.
  double peer_timeout_s = 0.0;
  /// The job's view: 0 at the start, + 1 each time the nodes left roll back without a failed peer
  /// (apps/pipeline: run_with_recovery). A dialer of a newer view that reaches a node still in
  /// an older one (leaving it) is refused with "retry" and dials again, until connect_timeout_s.
  std::uint32_t view = 0;
  /// This node restarted after it failed and rejoins a running job under its old rank: start()
  /// dials every peer (not only the lower ranks) and says so in its Challenge and Hello; a peer
  /// that has seen this rank fail takes it back (Transport::RejoinHandler), one that still holds
  /// a live connection for it answers "retry" until it notices the old one is gone.
  bool rejoin = false;
  /// The job secret (any bytes, any length), the same on every peer: both ends of every connection
  /// prove they hold it before any other frame is read (net/tcp/auth.h). Empty: no authentication,
  /// and a peer with a secret refuses this node. Never logged; the transport keeps only a key
  /// derived from it.
  std::string secret;
  /// With a secret: seal every frame after the authentication with a key of the connection's and
  /// direction's own (net/tcp/frame_cipher.h: ChaCha20-Poly1305), so a frame altered, forged,
  /// replayed or read on the way is detected (the connection closes, counted as
  /// Counters::unverified_frames) or unreadable. Both ends must agree (a Challenge says it; a
  /// mismatch is refused naming both). Without a secret there is no key: nothing is sealed.
  bool encrypt = true;
  /// How peer host names become addresses (TcpTransport). Unset (the default): getaddrinfo, every
  /// address of the host in RFC 6724 order. A dialer tries each address of a peer until one
  /// connects (RFC 8305: the next one starts 250 ms after the last or at once when it fails); a
  /// node listens on every address of its own entry. Tests set it to make a resolver order (e.g.
  /// ::1 before 127.0.0.1) without editing /etc/hosts.
  Resolver resolver;
};

/// Name of the counter lane of handshake and goodbye frames.
inline constexpr const char* kControlLane = "control";

}  // namespace gradmesh::net

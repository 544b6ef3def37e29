#pragma once
// Internal to net/tcp/ (includes <uv.h>): accepting. This node's listening sockets and the accepted
// connections whose handshake is not done yet, bounded in number and in time.

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/tcp/connection.h"
#include "net/tcp/resolve.h"

namespace gradmesh::net::tcp {

// Accepted connections still in their handshake: at most 2 x peers + this many in all, and
// peers + kExtraPendingHandshakesPerAddress from one IP address (every peer may share one, as on
// loopback). One past a cap is closed at once.
inline constexpr std::size_t kExtraPendingHandshakes = 64;
inline constexpr std::size_t kExtraPendingHandshakesPerAddress = 16;

/// What a Listener needs from the transport that owns it. Loop thread; must not throw.
class ListenerOwner {
 public:
  /// A new Connection to accept into (Connection::make, Role::kAcceptor, rank unknown), reporting
  /// to the transport's ConnectionListener.
  [[nodiscard]] virtual detail::Connection* make_accept_connection() noexcept = 0;
  /// Logs and counts `connection` as rejected (`why`), and closes it (close_connection()).
  virtual void reject_inbound(detail::Connection& connection, const std::string& why) noexcept = 0;
  /// Closes `connection` and drops every reference the transport keeps to it (forget() here).
  virtual void close_connection(detail::Connection& connection) noexcept = 0;
  /// The transport is closing: accept nothing more.
  [[nodiscard]] virtual bool stopping() const noexcept = 0;

 protected:
  ~ListenerOwner() = default;
};

/// Listens on every address of this node's own peer-list entry and accepts connections; keeps
/// the accepted ones until their handshake is done (handshake_done()), closing those past the
/// caps (kExtraPendingHandshakes, kExtraPendingHandshakesPerAddress) at once and those past
/// `handshake_timeout_s` on a timer (every quarter of it), both as rejected
/// (ListenerOwner::reject_inbound).
///
/// Owns: the listening uv_tcp_t handles, the handshake-deadline timer, and the list of accepted
/// connections in their handshake (non-owning pointers: a Connection is closed through the owner,
/// which calls forget()).
/// Threads: construct on any thread; open() and listen() before the loop thread runs (start()'s
/// thread); everything else on the loop thread only. Only listen() throws (PeerError).
/// Not movable: libuv holds pointers to its handles. close() before the loop is closed.
class Listener final {
 public:
  /// For the node `self_rank` of `peers` ranks (the caps), failing handshakes that take longer
  /// than `handshake_timeout_s` (> 0) seconds.
  Listener(ListenerOwner& owner, std::size_t self_rank, std::size_t peers,
           double handshake_timeout_s);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Starts the handshake-deadline timer on `loop`. Once, before listen().
  void open(uv_loop_t* loop) noexcept;
  /// Binds and listens on every one of `addresses` (this node's entry, `address` its text). An
  /// address that is not this host's (EADDRNOTAVAIL, EAFNOSUPPORT) is skipped with a warning;
  /// throws PeerError naming every failure when another error occurs or none listens.
  void listen(const std::vector<ResolvedAddress>& addresses, const std::string& address);
  /// `connection` passed its Hello: it leaves the pending list (the transport owns it now).
  void handshake_done(detail::Connection& connection) noexcept { forget(connection); }
  /// Drops `connection` from the pending list, if there (it is being closed).
  void forget(detail::Connection& connection) noexcept;
  /// Closes the listening handles and the deadline timer. Idempotent.
  void close_handles() noexcept;
  /// Closes every pending connection (ListenerOwner::close_connection).
  void close_pending() noexcept;

 private:
  static void on_new_connection(uv_stream_t* server, int status) noexcept;
  static void on_handshake_deadline(uv_timer_t* timer) noexcept;

  ListenerOwner& owner_;
  std::size_t self_rank_;
  std::size_t peers_;
  double handshake_timeout_s_;
  uv_loop_t* loop_ = nullptr;
  // One per address of this node's own entry; heap: handles never move.
  std::vector<std::unique_ptr<uv_tcp_t>> listeners_;
  uv_timer_t handshake_timer_{};  // closes accepted connections past the timeout
  std::vector<detail::Connection*> pending_inbound_;  // accepted, not yet handshaked
};

}  // namespace gradmesh::net::tcp

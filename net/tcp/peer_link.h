#pragma once
// Internal to net/tcp/ (includes <uv.h>): what the TCP transport keeps about one peer. Its
// addresses, its connection, its dialer, the indirect probe of its silence, and its failure.

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "net/tcp/connection.h"
#include "net/tcp/dialer.h"
#include "net/tcp/liveness_query.h"
#include "net/tcp/resolve.h"

namespace gradmesh::net::tcp {

/// One peer of the mesh as this node sees it (gloo's Pair, with its stored exception).
///
/// Owns: its Dialer (for the ranks this node dials) and its LivenessQuery. Does not own its
/// Connection (a Connection deletes itself once closed: the transport clears the pointer when it
/// closes one).
///
/// Locking rule, three groups of members:
///  - set before the loop thread starts, read-only after: address(), addresses(); any thread.
///  - loop thread only, no lock: connection(), dialer() (but Dialer::errors_locked()),
///    liveness().
///  - guarded by the transport's mutex (TcpTransport::Impl::mutex_), written on the loop thread
///    and read by callers' threads: the `_locked` members. The failure is a value: the loop thread
///    stores it (fail_locked(), never throwing there) and a caller's send() rethrows it on its own
///    thread (throw_if_failed_locked()).
/// Not movable: the Dialer's timers are registered with libuv.
class PeerLink final {
 public:
  PeerLink() = default;
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // ---- set up before the loop thread runs ----
  /// The peer-list entry (Endpoint::to_string()).
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  void set_address(std::string address) { address_ = std::move(address); }
  /// Every address of the peer's host, in the order a dialer tries them (resolve_all()).
  [[nodiscard]] const std::vector<ResolvedAddress>& addresses() const noexcept {
    return addresses_;
  }
  void set_addresses(std::vector<ResolvedAddress> addresses) { addresses_ = std::move(addresses); }
  /// Gives this peer a Dialer (a rank this node dials), after set_addresses(): see Dialer's
  /// constructor. Once.
  Dialer& make_dialer(DialerOwner& owner, std::mutex& errors_mutex, std::size_t self_rank,
                      std::size_t rank) {
    return dialer_.emplace(owner, errors_mutex, self_rank, rank, addresses_);
  }

  // ---- loop thread ----
  /// The connection past its handshake's first step (the dialer's winner, or the acceptor's once
  /// its Hello was accepted), or null.
  [[nodiscard]] detail::Connection* connection() const noexcept { return connection_; }
  void set_connection(detail::Connection* connection) noexcept { connection_ = connection; }
  /// Null for a rank this node accepts from.
  [[nodiscard]] Dialer* dialer() noexcept { return dialer_ ? &*dialer_ : nullptr; }
  /// The indirect probe of this peer's silence (lifecycle.cpp, check_silence).
  [[nodiscard]] LivenessQuery& liveness() noexcept { return liveness_; }
  /// What another peer said of this one when it closed its connection to it (a ConnectionNotice:
  /// "rank 0 closed its connection to it: ..."), or "": added to this peer's failure.
  [[nodiscard]] const std::string& notice() const noexcept { return notice_; }
  void set_notice(std::string notice) { notice_ = std::move(notice); }

  // ---- the transport's mutex held ----
  /// Its handshake completed (and it has not failed during start()).
  [[nodiscard]] bool connected_locked() const noexcept { return connected_; }
  void set_connected_locked(bool connected) noexcept { connected_ = connected; }
  /// Shutdown finished for this peer: goodbyes exchanged, failed or absent.
  [[nodiscard]] bool done_locked() const noexcept { return done_; }
  void set_done_locked() noexcept { done_ = true; }
  /// Its failure, or null while it is live.
  [[nodiscard]] const PeerError* failure_locked() const noexcept {
    return failure_ ? &*failure_ : nullptr;
  }
  /// Throws its failure (a copy of the stored PeerError), if it failed.
  void throw_if_failed_locked() const {
    if (failure_) throw PeerError(*failure_);
  }
  /// Stores `error` as its failure and marks it done; false (nothing changed) when it had failed
  /// already: the first failure stands.
  [[nodiscard]] bool fail_locked(const PeerError& error) {
    if (failure_) return false;
    failure_ = error;
    done_ = true;
    return true;
  }
  /// A restarted node took the rank back: live again (no failure, not done, no refusal).
  void rejoined_locked() noexcept {
    failure_.reset();
    done_ = false;
    last_refusal_.clear();
  }
  /// Why this node last refused (or was refused by) a connection of this rank, for start()'s
  /// time-out error; "" when none.
  [[nodiscard]] const std::string& last_refusal_locked() const noexcept { return last_refusal_; }
  void set_last_refusal_locked(std::string why) { last_refusal_ = std::move(why); }
  /// Why each of its addresses last failed to connect (Dialer::errors_locked()), or "".
  [[nodiscard]] std::string dial_errors_locked() const {
    return dialer_ ? dialer_->errors_locked() : std::string();
  }

 private:
  std::string address_;
  std::vector<ResolvedAddress> addresses_;
  // loop thread
  detail::Connection* connection_ = nullptr;
  std::optional<Dialer> dialer_;
  LivenessQuery liveness_;
  std::string notice_;
  // guarded by the transport's mutex
  bool connected_ = false;
  bool done_ = false;
  std::optional<PeerError> failure_;
  std::string last_refusal_;
};

}  // namespace gradmesh::net::tcp

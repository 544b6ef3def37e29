#pragma once
// Internal to net/tcp/ (includes <uv.h>): dialing one peer. Its addresses tried in turn, racing
// (RFC 8305's staggered attempts), retried with back-off until one connects.

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "net/tcp/connection.h"
#include "net/tcp/resolve.h"

namespace gradmesh::net::tcp {

inline constexpr std::uint64_t kFirstBackoffMs = 50;
inline constexpr std::uint64_t kMaxBackoffMs = 1000;
// RFC 8305 sec. 5 ("Happy Eyeballs"), the Connection Attempt Delay: a dialer starts its connect to
// a peer's next address this long after the last one began (at once when the last one fails),
// keeping the earlier ones; the first to connect wins.
inline constexpr std::uint64_t kAttemptDelayMs = 250;

/// What a Dialer needs from the transport that owns it. Loop thread; must not throw.
class DialerOwner {
 public:
  /// A new dialing Connection to `rank` (Connection::make, Role::kDialer), reporting to the
  /// transport's ConnectionListener.
  [[nodiscard]] virtual detail::Connection* make_dial_connection(std::size_t rank) noexcept = 0;
  /// Closes `connection` and drops every reference the transport keeps to it.
  virtual void close_connection(detail::Connection& connection) noexcept = 0;
  /// The transport is closing: no more dials or retries.
  [[nodiscard]] virtual bool stopping() const noexcept = 0;

 protected:
  ~DialerOwner() = default;
};

/// Dials one peer (a rank this node connects to rather than accepts from).
///
/// A round (dial()) connects to the peer's addresses in order, starting the next one
/// kAttemptDelayMs after the last began or at once when it failed, and keeping the earlier
/// attempts: the first to connect wins (connected()) and the others are closed. When every
/// attempt of a round has failed, the next round starts after a back-off (schedule_retry():
/// kFirstBackoffMs doubling to kMaxBackoffMs). Why each address last failed is kept for
/// start()'s time-out error (errors_locked()).
///
/// Owns: its two timers (attempt delay, retry) and the Connections of attempts in flight (until
/// one wins: the winner goes to the transport). Does not own the addresses (the PeerLink's).
/// Threads: construct, open() and dial() before the loop thread runs, or on it; everything else
/// on the loop thread only, but errors_locked(), which any thread may call holding the mutex given
/// to the constructor (the loop thread takes it to record an error). Never throws after the
/// constructor; a failed connect is recorded and logged at debug level, not raised.
/// Not movable: libuv holds pointers to its timers. close() before the loop is closed.
class Dialer final {
 public:
  /// Dials `rank` at `addresses` (kept by reference: they must outlive the Dialer) for the node
  /// `self_rank` (for log lines). `errors_mutex` guards the recorded errors.
  Dialer(DialerOwner& owner, std::mutex& errors_mutex, std::size_t self_rank, std::size_t rank,
         const std::vector<ResolvedAddress>& addresses);
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;

  /// Initialises the timers on `loop`. Once, before dial().
  void open(uv_loop_t* loop) noexcept;
  /// Closes the timers and every attempt in flight (DialerOwner::close_connection). Idempotent.
  void close() noexcept;

  /// Starts a dialing round from the first address (nothing when the owner is stopping).
  void dial() noexcept;
  /// Starts a round after the back-off, and doubles it (up to kMaxBackoffMs): all attempts
  /// failed, or the winner's handshake broke or was refused with "dial again".
  void schedule_retry() noexcept;
  /// An attempt's connect finished (the transport's ConnectionListener::on_connected). On failure
  /// (`status` != 0) records it, closes `connection` and goes on (the next address at once, or a
  /// retry when none is left and no attempt is in flight): returns false. On success the other
  /// attempts are closed and the round ends: returns true, `connection` is the caller's.
  [[nodiscard]] bool connected(detail::Connection& connection, int status) noexcept;

  /// "[::1]:4000: ECONNREFUSED: ...; 127.0.0.1:4000: ..." for the addresses whose last connect
  /// failed, or "". Caller holds the errors mutex.
  [[nodiscard]] std::string errors_locked() const;

 private:
  void try_next_address() noexcept;
  void note_error(std::size_t address, const std::string& why) noexcept;
  static void on_retry(uv_timer_t* timer) noexcept;
  static void on_attempt_delay(uv_timer_t* timer) noexcept;

  DialerOwner& owner_;
  std::mutex& errors_mutex_;
  std::size_t self_rank_;
  std::size_t rank_;
  const std::vector<ResolvedAddress>& addresses_;  // every address of the peer, in the order tried
  // loop thread
  std::vector<detail::Connection*> attempts_;  // TCP connects in flight, one per address tried
  std::size_t next_address_ = 0;               // the address the round tries next
  uv_timer_t attempt_timer_{};                 // starts the next address (kAttemptDelayMs)
  uv_timer_t retry_timer_{};                   // starts the next round (backoff_ms_)
  std::uint64_t backoff_ms_ = kFirstBackoffMs;
  bool opened_ = false;
  // guarded by errors_mutex_: per address, why its last connect failed ("" when it did not)
  std::vector<std::string> errors_;
};

}  // namespace gradmesh::net::tcp

#pragma once
// Internal to net/tcp/ (includes <uv.h>): the mesh's liveness, one owner for it: heartbeats on
// quiet connections, peers silent for net.peer_timeout, the indirect probe of a silent peer
// through the others (LivenessQuery / LivenessReport: SWIM's ping-req, Das, Gupta, Motivala,
// DSN'02, sec. 4.1) and the notices a node sends its other peers when it closes a connection
// (ConnectionNotice). docs/failures.md, "Silent peers".

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/counters.h"
#include "net/frame.h"
#include "net/tcp/connection.h"
#include "net/tcp/peer_link.h"

namespace gradmesh::net::tcp {

/// A peer this node does not hear while others vouch for it (LivenessReport) is failed all the same
/// once this node has read nothing from it for this many peer timeouts: a connection broken one way
/// must not stall the job for good. Six (60 s at the default 10 s) outlasts TCP's retransmission
/// backoff on a congested link (0.2 s doubling: 5 lost retransmissions in a row sum to 6.2 s of
/// waiting, 6 to 12.6 s, 7 to 25.4 s).
inline constexpr std::uint64_t kMaxVouchedTimeouts = 6;

/// What Liveness asks of the mesh that holds it (TcpTransport::Impl). Loop thread; never throws.
class LivenessOwner {
 public:
  /// Fails peer `rank` with `why` (closes its connection, reports it).
  virtual void fail_silent_peer(std::size_t rank, const std::string& why) noexcept = 0;
  /// Queues a control frame on `connection` (sent at the next pump).
  virtual void queue_control(detail::Connection& connection,
                             std::unique_ptr<OutgoingFrame> frame) noexcept = 0;
  /// Writes what is queued, as the send cap allows.
  virtual void pump_sends() noexcept = 0;
  /// A control frame from `connection` that names a rank it may not: counted and logged as
  /// malformed.
  virtual void reject_control(detail::Connection& connection, const std::string& why,
                              std::size_t wire_bytes) noexcept = 0;
  /// Whether the mesh is shutting down or stopped (shutdown has its own timeout: no heartbeats).
  [[nodiscard]] virtual bool quiescing() const noexcept = 0;

 protected:
  ~LivenessOwner() = default;
};

/// The liveness of this node's peers (the PeerLinks of the mesh, their LivenessQuery each).
///
/// Threads: construct on any thread; open() before the loop thread runs; every other call on the
/// loop thread only. Never throws after the constructor: a frame that cannot be queued is logged.
class Liveness final {
 public:
  /// `peers`: the mesh's links, index = rank (this node's own is `rank`); `peer_timeout_s` <= 0:
  /// no heartbeats, no silence checks. `control_lane`: the lane control frames are counted on.
  Liveness(LivenessOwner& owner, std::vector<PeerLink>& peers, std::size_t rank,
           double peer_timeout_s, std::size_t control_lane, CounterBook& counters);

  /// Initialises the heartbeat timer on `loop` and starts it (every quarter of the peer timeout).
  void open(uv_loop_t* loop);
  /// Closes the timer's handle (uv_close). Idempotent.
  void close() noexcept;

  /// Peer `rank` failed: it answers no LivenessQuery, so it counts as one that does not hear; a
  /// question it was the last answer due to is settled.
  void peer_failed(std::size_t rank) noexcept;
  /// Before closing the connection to `rank` on `why`: a ConnectionNotice to every other peer with
  /// an established connection.
  void tell_peers_why(std::size_t rank, const std::string& why) noexcept;

  /// The three control frames about a third rank (receive.cpp's dispatch), each checked and
  /// counted here (a rank out of range or not allowed: rejected as malformed).
  void on_query(detail::Connection& connection, const schema::LivenessQuery& query,
                std::size_t wire_bytes) noexcept;
  void on_report(detail::Connection& connection, const schema::LivenessReport& report,
                 std::size_t wire_bytes) noexcept;
  /// A peer's ConnectionNotice: logged, and kept as the notice of the rank it names (added to that
  /// rank's failure when it comes).
  void on_notice(detail::Connection& connection, const schema::ConnectionNotice& notice,
                 std::size_t wire_bytes) noexcept;

 private:
  static void on_timer(uv_timer_t* timer) noexcept;
  /// Every quarter of peer_timeout_s: fails the peers silent for longer than it, and sends a
  /// Heartbeat on each connection that has carried nothing for a quarter of it.
  void tick() noexcept;
  /// A connection silent for peer_timeout_s: the peer is failed once every other peer asked says
  /// it has not heard it within that either, or failed itself; or when this node itself has heard
  /// nothing from it for kMaxVouchedTimeouts x peer_timeout_s (answers slow behind bulk bytes
  /// wait until then). `direct_ms`: since the last byte read on the connection. Returns whether
  /// the peer was failed.
  bool check_silence(std::size_t rank, std::uint64_t now, std::uint64_t direct_ms) noexcept;
  /// Sends a LivenessQuery about `rank` to every other peer heard within peer_timeout_s; false
  /// when there is none.
  bool query(std::size_t rank, std::uint64_t now) noexcept;
  /// Every peer asked about `rank` answered no (or failed): fails it, if still connected.
  void settle(std::size_t rank) noexcept;
  /// fail_silent_peer() with "sent nothing for S s (net.peer_timeout = T s)" + `why`.
  void fail_silent(std::size_t rank, std::uint64_t direct_ms, const std::string& why) noexcept;
  /// A control frame about rank `about` is counted (true), or malformed when `about` is out of
  /// range or not `about_allowed` (false).
  bool accept_frame(detail::Connection& connection, const char* kind, std::size_t about,
                    bool about_allowed, std::size_t wire_bytes) noexcept;
  [[nodiscard]] std::uint64_t timeout_ms() const noexcept {
    return static_cast<std::uint64_t>(peer_timeout_s_ * 1000.0);
  }
  [[nodiscard]] std::uint64_t now() const noexcept { return uv_now(loop_); }

  LivenessOwner& owner_;
  std::vector<PeerLink>& peers_;
  std::size_t rank_;
  double peer_timeout_s_;
  std::size_t control_lane_;
  CounterBook& counters_;
  uv_loop_t* loop_ = nullptr;
  uv_timer_t timer_{};
  bool open_ = false;
};

}  // namespace gradmesh::net::tcp

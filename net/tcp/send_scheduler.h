#pragma once
// Internal to net/tcp/ (includes <uv.h>): the TCP transport's write scheduler. Which queued frame
// goes next over all of a node's connections, and how fast (the send cap).

#include <uv.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "net/frame.h"
#include "net/lane_scheduler.h"
#include "net/rate_limiter.h"
#include "net/tcp/connection.h"

namespace gradmesh::net::tcp {

// Under the send cap a frame is written in slices of this, so the lane choice and the token
// bucket act between slices. (Uncapped, the rest of a frame goes in one uv_write: see pump().)
inline constexpr std::size_t kSliceBytes = 64 * 1024;
// A connection whose libuv write queue holds this many bytes (handed to uv_write, not yet taken by
// the socket) starts no more until a write completes; it may exceed it by the rest of one frame
// (uncapped) or one slice (capped). Keeps the order in our queue, not in libuv's FIFO: a frame of
// lower priority overtakes all but this much and the one being written.
inline constexpr std::size_t kMaxBytesInFlight = 256 * 1024;

/// The send queue of a node: the connections with frames not yet handed to libuv (the ready list),
/// the lanes' shares of the link (LaneScheduler, set_weights()) and the send cap (one token bucket
/// for the node, paced by a timer of its own).
///
/// Which frame goes next (pump()): every ready connection with fewer than kMaxBytesInFlight bytes
/// in libuv's write queue (one fragment when its frames are cut) offers candidates
/// (Connection::for_each_candidate). A control frame goes first; among data frames the lane with
/// the least start-time-fair-queuing virtual time wins (net/lane_scheduler.h, Poseidon arXiv'15
/// sec. 4.3.3), ties by lower priority, then round-robin over connections. Capped, the winner
/// issues one slice (kSliceBytes) when the bucket allows it, else the pace timer pumps again when
/// it will; uncapped, the rest of its frame in one uv_write.
///
/// Owns: the ready list (non-owning Connection pointers: a connection must be forget()-ed before
/// it is closed), the LaneScheduler, the RateLimiter and the pace timer handle.
/// Threads: construct on any thread; open() before the loop thread runs; every other call on the
/// loop thread only. Never throws (but the constructor, std::bad_alloc); a failed write closes its
/// connection, which reports to its ConnectionListener (Connection::write_some).
class SendScheduler final {
 public:
  /// `lanes`: the transport's data lanes plus "control" (LaneScheduler's lanes).
  explicit SendScheduler(std::size_t lanes);
  SendScheduler(const SendScheduler&) = delete;
  SendScheduler& operator=(const SendScheduler&) = delete;

  /// Initialises the pace timer on `loop` and, with `max_send_rate` > 0 (bytes/s), the token
  /// bucket (RateLimiter's default capacities). Call once, before the loop runs; close() must
  /// follow before the loop is closed.
  void open(uv_loop_t* loop, double max_send_rate);
  /// Closes the pace timer (its close callback runs on the loop) and empties the ready list;
  /// pump() does nothing from then on. Idempotent.
  void close() noexcept;

  /// Queues `frame` on `connection` (Connection::enqueue) and puts the connection on the ready
  /// list, unless the enqueue failed and closed it. Does not write: pump() does.
  void enqueue(detail::Connection& connection, std::unique_ptr<OutgoingFrame> frame) noexcept;
  /// Takes `connection` off the ready list (call before closing it).
  void forget(detail::Connection& connection) noexcept;
  /// Sets the lanes' weights (checked by check_lane_weights()) and from then on lets a lane's
  /// frame overtake another lane's by share; before the first call every data frame of a
  /// connection goes in one order over all lanes (priority, then queue order).
  void set_weights(std::span<const double> weights) noexcept;
  /// Frames queued since `since` (RateLimiter::steady_seconds()) wait: under the send cap the link
  /// time since then counts as backlogged (a real NIC would have been sending them while this
  /// thread waited for a core). No-op uncapped or with nothing ready.
  void start_backlog(double since) noexcept;

  /// Writes what may go now, in the order above, until nothing is ready, every ready connection
  /// has its in-flight bytes, or the bucket is empty (then the pace timer calls pump() again).
  void pump() noexcept;

  /// Whether the ready list is empty: no connection has frames not yet issued (as far as the last
  /// pump() or forget() saw).
  [[nodiscard]] bool idle() const noexcept { return ready_.empty(); }

 private:
  struct Choice {
    detail::Connection* connection = nullptr;
    detail::WriteCandidate candidate;
  };
  Choice choose() noexcept;
  static void on_pace(uv_timer_t* timer) noexcept;

  std::optional<RateLimiter> limiter_;      // the send cap; none uncapped
  LaneScheduler scheduler_;                 // link shares of the lanes (set_weights)
  bool share_by_lane_ = false;              // weights were set: lanes may overtake each other
  std::vector<detail::Connection*> ready_;  // connections with unissued frames
  std::size_t ready_cursor_ = 0;            // round-robin start in ready_ for the next choice
  uv_timer_t pace_timer_{};                 // under the cap: pump() when the bucket allows
  bool opened_ = false;
  bool closed_ = false;
};

}  // namespace gradmesh::net::tcp

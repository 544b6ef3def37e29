#pragma once
// Internal to net/tcp/ (includes <uv.h>): TcpTransport's implementation class. It owns the loop,
// the parts below and the state shared with callers' threads, and connects them: the Listener
// (net/tcp/listener.h: listening, accepted connections in their handshake), one PeerLink per
// peer (net/tcp/peer_link.h: its connection, its Dialer, its liveness probe, its stored failure),
// the SendScheduler (net/tcp/send_scheduler.h: which frame goes next, the send cap), Liveness
// (net/tcp/liveness.h: heartbeats, silent peers, the indirect probe, the peers' notices) and the
// Authenticator (net/tcp/authenticator.h: the job secret's Challenges and Proof before the Hello,
// the session keys). Its methods live one concept a file: tcp_transport.cpp (construction and
// the public facade), mesh.cpp (start-up, refusals, the Hello), send_queue.cpp (callers' sends and
// settings, the loop thread's async wake-up), receive.cpp (frames in: dispatch, malformed frames,
// broken connections, writes completed), dialing.cpp (the Dialer's winner), lifecycle.cpp (peer
// failure, shutdown, closing).
//
// Threads: the public methods (start, enqueue_from_caller, shutdown, ...) run on callers'
// threads and meet the loop thread under mutex_ (the members under "shared with caller threads",
// and PeerLink's `_locked` members); everything else runs on the loop thread, and before it
// exists on start()'s thread. Nothing on the loop thread throws: a peer's failure is stored in its
// PeerLink and reported through the FailureHandler.

#include <netdb.h>

#include <spdlog/spdlog.h>
#include <uv.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "net/frame.h"
#include "net/lane_scheduler.h"
#include "net/rate_limiter.h"
#include "net/tcp/authenticator.h"
#include "net/tcp/connection.h"
#include "net/tcp/dialer.h"
#include "net/tcp/handshake.h"
#include "net/tcp/listener.h"
#include "net/tcp/liveness.h"
#include "net/tcp/liveness_query.h"
#include "net/tcp/log_throttle.h"
#include "net/tcp/peer_link.h"
#include "net/tcp/resolve.h"
#include "net/tcp/send_scheduler.h"
#include "net/tcp/tcp_transport.h"
#include "net/tcp/text.h"

namespace gradmesh::net {

namespace tcp {

using detail::Connection;

// Cut data frames (TcpTransport::set_link_rates): one fragment holds a connection for at most this
// share of the peer timeout at the link's measured rate, and is never smaller than the floor (a
// DataMore head is 8 + 24 bytes a fragment; the floor keeps that under 0.2%). A connection with
// cut frames keeps at most max(fragment, floor) in libuv's queue instead of kMaxBytesInFlight.
inline constexpr double kFragmentShare = 1.0 / 8.0;
inline constexpr std::size_t kMinFragmentBytes = 16 * 1024;
// start()'s time-out error names at most this many missing peers, then counts the rest (a
// 10,000-entry peer list must not make a 300,000-character line).
inline constexpr std::size_t kNamedMissing = 8;

}  // namespace tcp

using tcp::Connection;

class TcpTransport::Impl final : public detail::ConnectionListener,
                                 public tcp::DialerOwner,
                                 public tcp::ListenerOwner,
                                 public tcp::LivenessOwner,
                                 public tcp::AuthenticatorOwner {
 public:
  explicit Impl(TransportOptions options);
  ~Impl();

  void start();
  void enqueue_from_caller(std::size_t to_rank, std::unique_ptr<OutgoingFrame> frame);
  void shutdown(double timeout_s) noexcept;
  void stop_and_join() noexcept;
  void abort(const std::string& reason, std::optional<std::size_t> failed_peer) noexcept;
  void check_rank(std::size_t to_rank) const;
  void set_lane_weights(std::vector<double> weights);
  void pause_reading(std::size_t rank, bool paused);  // pause_reading_for_testing()
  void set_link_rates(std::vector<double> bytes_per_second);
  [[nodiscard]] std::size_t fragment_bytes(std::size_t rank) const;

  TransportOptions options_;
  std::vector<std::string> lane_names_;  // options_.lanes + "control"
  std::size_t control_lane_;
  MessageHandler on_message_;
  FailureHandler on_failure_;
  RejoinHandler on_rejoin_;
  CounterBook counters_;

 private:
  // ---- ConnectionListener (loop thread) ----
  void on_connected(Connection& connection, int status) noexcept override;
  void on_frame(Connection& connection, const schema::Header& header, Payload&& payload,
                std::size_t wire_bytes) noexcept override;
  void on_malformed(Connection& connection, const std::string& why,
                    std::size_t wire_bytes) noexcept override;
  void on_unverified(Connection& connection, const std::string& why) noexcept override;
  void on_broken(Connection& connection, int status, const std::string& why) noexcept override;
  void on_written(Connection& connection, const OutgoingFrame& frame, std::size_t bytes,
                  bool frame_done) noexcept override;
  void on_writable(Connection& connection) noexcept override;
  void on_bytes_read(Connection& connection, std::size_t bytes) noexcept override;

  // ---- DialerOwner and ListenerOwner (loop thread) ----
  Connection* make_dial_connection(std::size_t rank) noexcept override;
  Connection* make_accept_connection() noexcept override;
  void reject_inbound(Connection& connection, const std::string& why) noexcept override;
  // Takes `connection` off the send queue, the pending list and its peer, and closes it.
  void close_connection(Connection& connection) noexcept override;
  [[nodiscard]] bool stopping() const noexcept override { return stopping_; }

  // ---- LivenessOwner (loop thread) ----
  void fail_silent_peer(std::size_t rank, const std::string& why) noexcept override {
    fail_peer(rank, why);
  }
  void queue_control(Connection& connection,
                     std::unique_ptr<OutgoingFrame> frame) noexcept override {
    queue_frame(connection, std::move(frame));
  }
  void pump_sends() noexcept override { pump(); }
  void reject_control(Connection& connection, const std::string& why,
                      std::size_t wire_bytes) noexcept override {
    on_malformed(connection, why, wire_bytes);
  }
  [[nodiscard]] bool quiescing() const noexcept override { return stopping_ || shutting_down_; }

  // ---- AuthenticatorOwner (loop thread; queue_control, pump_sends, reject_inbound and
  // close_connection above, refuse, fail_start, rejoin_refusal and log_rejection below) ----
  void handle_dialer_reply(Connection& connection, const schema::Header& header,
                           std::size_t wire) noexcept override;
  void set_last_refusal(std::size_t rank, const std::string& why) noexcept override {
    const std::lock_guard lock(mutex_);
    peers_[rank].set_last_refusal_locked(why);
  }
  [[nodiscard]] detail::ReadLimits authenticated_limits() const noexcept override {
    return limits(true, /*authenticated=*/true);
  }
  [[nodiscard]] std::unique_ptr<OutgoingFrame> encode_our_hello() const override {
    return encode_hello(our_hello(), control_lane_);
  }

  // ---- loop thread ----
  static void on_async(uv_async_t* handle) noexcept;
  void run_loop() noexcept;
  // The ranks this node dials: the lower ones, or every other one when it rejoins.
  [[nodiscard]] bool dials(std::size_t rank) const noexcept {
    return rank != options_.rank && (rank < options_.rank || options_.rejoin);
  }
  // Why a handshake claiming `rank` (rejoining or not) cannot go on now, or "" (acceptor); sets
  // `retry` when the dialer should dial again. A plain claim of a failed rank is refused (it must
  // say it rejoins): called for it at the Hello only, after the view check.
  [[nodiscard]] std::string rejoin_refusal(std::size_t rank, bool rejoin,
                                           bool& retry) noexcept override;
  void handle_hello(Connection& connection, const schema::Hello& hello, std::size_t wire) noexcept;
  // Counts an inbound connection rejected during the handshake and logs it at `level`, one line
  // a second at most (the next line says how many were left out).
  void log_rejection(spdlog::level::level_enum level, const std::string& line) noexcept override;
  // Sends a Refuse saying `why` and closes after it; logged, and counted when inbound. With
  // `fails_start`, start() fails naming `claimed_rank` once the Refuse is written.
  void refuse(Connection& connection, std::size_t claimed_rank, const std::string& why,
              bool fails_start, bool retry = false) noexcept override;
  void finish_refusal(Connection& connection) noexcept;
  void mark_connected(Connection& connection) noexcept;
  /// Gives `connection` its peer's fragment size (set_link_rates()). Loop thread.
  void apply_fragment_bytes(Connection& connection) noexcept;
  void fail_peer(std::size_t rank, const std::string& why,
                 std::optional<std::size_t> failed_peer = std::nullopt) noexcept;
  void fail_start(PeerError error) noexcept override;
  // The send queue's (SendScheduler::enqueue and pump).
  void queue_frame(Connection& connection, std::unique_ptr<OutgoingFrame> frame) noexcept {
    send_queue_.enqueue(connection, std::move(frame));
  }
  void pump() noexcept { send_queue_.pump(); }
  void begin_shutdown() noexcept;
  void maybe_finish_peer(Connection& connection) noexcept;
  void mark_done(std::size_t rank) noexcept;
  void close_all() noexcept;
  // The reader's limits: before the handshake, before the peer proved itself (`authenticated`:
  // its Challenge's or Proof's MAC checked, or the nonce exchange done without a secret) a header
  // of at most kMaxPreAuthHeaderBytes; after the handshake, max_frame_bytes.
  detail::ReadLimits limits(bool handshake, bool authenticated = false) const noexcept;
  HelloFields our_hello() const;

  // ---- caller side ----
  [[nodiscard]] std::size_t count_connected_locked() const noexcept;
  [[nodiscard]] std::size_t count_done_locked() const noexcept;

  std::vector<tcp::PeerLink> peers_;  // index = rank; this node's own entry has no connection

  uv_loop_t loop_{};
  uv_async_t async_{};
  bool loop_initialised_ = false;
  std::thread thread_;

  // loop thread only
  tcp::Listener listener_;
  tcp::SendScheduler send_queue_;
  tcp::Liveness liveness_;  // heartbeats, silent peers, the peers' notices (net/tcp/liveness.h)
  tcp::Authenticator authenticator_;  // the job secret's challenge-response (authenticator.h)
  tcp::LogThrottle rejection_log_;    // inbound rejections: one line a second at most
  std::vector<std::pair<std::size_t, std::unique_ptr<OutgoingFrame>>> draining_;
  bool stopping_ = false;
  bool shutting_down_ = false;

  // shared with caller threads
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<std::size_t, std::unique_ptr<OutgoingFrame>>> incoming_;
  double incoming_since_ = 0;  // RateLimiter::steady_seconds() when incoming_ last filled
  std::optional<std::vector<double>> incoming_weights_;  // set_lane_weights(), not yet applied
  std::vector<std::pair<std::size_t, bool>> incoming_pauses_;  // pause_reading_for_testing()
  // set_link_rates(): fragment payload bytes per peer (0: not cut); the loop thread applies them
  // to the connections (on_async, mark_connected). Under mutex_.
  std::vector<std::size_t> fragment_bytes_;
  bool fragments_changed_ = false;
  bool loop_accepts_ = false;   // async_ is live: uv_async_send allowed
  bool sends_allowed_ = false;  // between a successful start() and shutdown()
  bool started_ = false;        // start() succeeded
  bool shutdown_requested_ = false;
  bool stop_requested_ = false;
  bool closed_ = false;             // thread joined, loop closed
  std::size_t aborts_pending_ = 0;  // Abort frames queued by abort() and not yet written
  std::exception_ptr start_error_;
};

}  // namespace gradmesh::net

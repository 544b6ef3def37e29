#include "net/tcp/tcp_transport.h"

#include <netdb.h>
#include <spdlog/spdlog.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "net/tcp/connection.h"
#include "net/frame.h"
#include "net/tcp/handshake.h"
#include "net/rate_limiter.h"

namespace gradmesh::net {

namespace {

using detail::Connection;

constexpr std::size_t kNoRank = static_cast<std::size_t>(-1);
constexpr std::size_t kSliceBytes = 64 * 1024;  // write window when rate limited
constexpr std::uint64_t kFirstBackoffMs = 50;
constexpr std::uint64_t kMaxBackoffMs = 1000;

std::string uv_error_text(int status) {
  return std::string(uv_err_name(status)) + ": " + uv_strerror(status);
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  return text;
}

// Blocking name resolution (start() only, on the caller's thread).
sockaddr_storage resolve(std::size_t rank, const Endpoint& endpoint) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string port = std::to_string(endpoint.port);
  const int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr)
    throw PeerError(rank, endpoint.to_string(),
                    std::string("cannot resolve host: ") + gai_strerror(rc));
  sockaddr_storage storage{};
  std::memcpy(&storage, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  return storage;
}

const char* body_name(schema::Body type) {
  const char* name = schema::EnumNameBody(type);
  return (name != nullptr && *name != '\0') ? name : "unknown";
}

}  // namespace

class TcpTransport::Impl final : public detail::ConnectionListener {
 public:
  explicit Impl(TransportOptions options);
  ~Impl();

  void start();
  void enqueue_from_caller(std::size_t to_rank, std::unique_ptr<OutgoingFrame> frame);
  void shutdown(double timeout_s) noexcept;
  void stop_and_join() noexcept;
  void abort(const std::string& reason) noexcept;
  void check_rank(std::size_t to_rank) const;

  TransportOptions options_;
  std::vector<std::string> stage_names_;  // options_.stages + "control"
  std::size_t control_stage_;
  MessageHandler on_message_;
  FailureHandler on_failure_;
  CounterBook counters_;

 private:
  struct Peer {
    std::string address;           // Endpoint::to_string()
    sockaddr_storage socket_address{};
    // loop thread
    Connection* connection = nullptr;
    uv_timer_t retry_timer{};
    std::uint64_t backoff_ms = kFirstBackoffMs;
    // guarded by mutex_
    bool connected = false;
    bool done = false;  // shutdown finished for this peer (goodbyes exchanged, failed or absent)
    std::optional<PeerError> failure;
  };

  // ---- ConnectionListener (loop thread) ----
  void on_connected(Connection& connection, int status) noexcept override;
  void on_frame(Connection& connection, const schema::Header& header, Payload&& payload,
                std::size_t wire_bytes) noexcept override;
  void on_malformed(Connection& connection, const std::string& why,
                    std::size_t wire_bytes) noexcept override;
  void on_broken(Connection& connection, int status, const std::string& why) noexcept override;
  void on_written(Connection& connection, const OutgoingFrame& frame, std::size_t bytes,
                  bool frame_done) noexcept override;
  void on_bytes_read(Connection& connection, std::size_t bytes) noexcept override;

  // ---- loop thread ----
  static void on_async(uv_async_t* handle) noexcept;
  static void on_new_connection(uv_stream_t* server, int status) noexcept;
  static void on_retry(uv_timer_t* timer) noexcept;
  static void on_pace(uv_timer_t* timer) noexcept;
  void run_loop() noexcept;
  void dial(std::size_t rank) noexcept;
  void schedule_retry(std::size_t rank) noexcept;
  void handle_hello(Connection& connection, const schema::Hello& hello, std::size_t wire) noexcept;
  void handle_dialer_reply(Connection& connection, const schema::Header& header,
                           std::size_t wire) noexcept;
  void reject_inbound(Connection& connection, const std::string& why) noexcept;
  void finish_refusal(Connection& connection) noexcept;
  void mark_connected(Connection& connection) noexcept;
  void fail_peer(std::size_t rank, const std::string& why) noexcept;
  void fail_start(PeerError error) noexcept;
  void close_connection(Connection& connection) noexcept;
  void queue_frame(Connection& connection, std::unique_ptr<OutgoingFrame> frame) noexcept;
  void pump() noexcept;
  void begin_shutdown() noexcept;
  void maybe_finish_peer(Connection& connection) noexcept;
  void mark_done(std::size_t rank) noexcept;
  void close_all() noexcept;
  detail::ReadLimits limits(bool handshake) const noexcept;
  HelloFields our_hello() const;

  // ---- caller side ----
  [[nodiscard]] std::size_t count_connected_locked() const noexcept;
  [[nodiscard]] std::size_t count_done_locked() const noexcept;

  std::vector<Peer> peers_;

  uv_loop_t loop_{};
  uv_async_t async_{};
  uv_tcp_t listener_{};
  uv_timer_t pace_timer_{};
  bool loop_initialised_ = false;
  std::thread thread_;

  // loop thread only
  std::optional<RateLimiter> limiter_;
  std::deque<Connection*> ready_;           // connections with unissued frames, round-robin
  std::vector<Connection*> pending_inbound_;  // accepted, not yet handshaked
  std::vector<std::pair<std::size_t, std::unique_ptr<OutgoingFrame>>> draining_;
  bool stopping_ = false;
  bool shutting_down_ = false;

  // shared with caller threads
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<std::size_t, std::unique_ptr<OutgoingFrame>>> incoming_;
  double incoming_since_ = 0;    // RateLimiter::steady_seconds() when incoming_ last filled
  bool loop_accepts_ = false;    // async_ is live: uv_async_send allowed
  bool sends_allowed_ = false;   // between a successful start() and shutdown()
  bool started_ = false;         // start() succeeded
  bool shutdown_requested_ = false;
  bool stop_requested_ = false;
  bool closed_ = false;          // thread joined, loop closed
  std::size_t aborts_pending_ = 0;  // Abort frames queued by abort() and not yet written
  std::exception_ptr start_error_;
};

// ====================================================================== construction

TcpTransport::Impl::Impl(TransportOptions options)
    : options_(std::move(options)),
      stage_names_(options_.stages),
      control_stage_(options_.stages.size()),
      counters_(options_.peers.size(),
                [&] {
                  auto names = options_.stages;
                  names.emplace_back(kControlStage);
                  return names;
                }()),
      peers_(options_.peers.size()) {
  stage_names_.emplace_back(kControlStage);
  for (std::size_t r = 0; r < peers_.size(); ++r) peers_[r].address = options_.peers[r].to_string();
}

TcpTransport::Impl::~Impl() { stop_and_join(); }

detail::ReadLimits TcpTransport::Impl::limits(bool handshake) const noexcept {
  return {options_.max_frame_bytes, options_.stages.size(), handshake};
}

HelloFields TcpTransport::Impl::our_hello() const {
  HelloFields hello;
  hello.rank = options_.rank;
  hello.job_name = options_.job_name;
  hello.config_hash = options_.config_hash;
  for (const auto& peer : peers_) hello.peers.push_back(peer.address);
  return hello;
}

std::size_t TcpTransport::Impl::count_connected_locked() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(peers_.begin(), peers_.end(), [](const Peer& p) { return p.connected; }));
}

std::size_t TcpTransport::Impl::count_done_locked() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(peers_.begin(), peers_.end(), [](const Peer& p) { return p.done; }));
}

// ====================================================================== start

void TcpTransport::Impl::start() {
  {
    const std::lock_guard lock(mutex_);
    if (loop_initialised_ || closed_) throw Error("Transport::start() called twice");
  }
  const std::size_t self = options_.rank;
  for (std::size_t r = 0; r < peers_.size(); ++r)
    peers_[r].socket_address = resolve(r, options_.peers[r]);

  uv_loop_init(&loop_);
  loop_initialised_ = true;
  loop_.data = this;
  uv_async_init(&loop_, &async_, &Impl::on_async);
  async_.data = this;
  uv_timer_init(&loop_, &pace_timer_);
  pace_timer_.data = this;
  uv_tcp_init(&loop_, &listener_);
  listener_.data = this;
  for (std::size_t r = 0; r < self; ++r) {
    uv_timer_init(&loop_, &peers_[r].retry_timer);
    peers_[r].retry_timer.data = this;
  }
  if (options_.max_send_rate > 0.0)
    limiter_.emplace(options_.max_send_rate, RateLimiter::default_capacity(options_.max_send_rate),
                     &RateLimiter::steady_seconds,
                     RateLimiter::default_backlog_capacity(options_.max_send_rate));

  int rc = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&peers_[self].socket_address), 0);
  if (rc == 0)
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 128, &Impl::on_new_connection);
  {
    const std::lock_guard lock(mutex_);
    loop_accepts_ = true;
  }
  if (rc != 0) {
    stop_and_join();  // runs the loop once to close the handles
    throw PeerError(self, peers_[self].address, "cannot listen: " + uv_error_text(rc));
  }
  for (std::size_t r = 0; r < self; ++r) dial(r);  // before the thread exists: no race
  thread_ = std::thread([this] { run_loop(); });

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options_.connect_timeout_s));
  std::unique_lock lock(mutex_);
  const std::size_t others = peers_.size() - 1;
  const bool finished = changed_.wait_until(lock, deadline, [&] {
    return start_error_ != nullptr || count_connected_locked() == others;
  });
  if (finished && start_error_ == nullptr) {
    started_ = true;
    sends_allowed_ = true;
    return;
  }
  std::exception_ptr error = start_error_;
  if (error == nullptr) {
    std::string missing;
    std::size_t first = kNoRank;
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (r == self || peers_[r].connected) continue;
      // Name a never-connected rank first: a peer that failed may only have given up on it.
      if (first == kNoRank || (peers_[first].failure && !peers_[r].failure)) first = r;
      missing += (missing.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + " (" +
                 peers_[r].address + ")";
      if (peers_[r].failure) missing += " [connected, then failed: " + std::string(peers_[r].failure->what()) + "]";
    }
    error = std::make_exception_ptr(
        PeerError(first, peers_[first].address,
                  "timed out after " + seconds_text(options_.connect_timeout_s) +
                      " s waiting for peers: " + missing));
  }
  lock.unlock();
  stop_and_join();
  std::rethrow_exception(error);
}

// ====================================================================== caller-side control

void TcpTransport::Impl::check_rank(std::size_t to_rank) const {
  GRADMESH_CHECK_LT(to_rank, peers_.size(), "send() to a rank outside the peer list");
  GRADMESH_CHECK(to_rank != options_.rank, "send() to this node's own rank");
}

void TcpTransport::Impl::enqueue_from_caller(std::size_t to_rank,
                                          std::unique_ptr<OutgoingFrame> frame) {
  if (frame->wire_bytes() > options_.max_frame_bytes)
    throw ProtocolError("frame of " + std::to_string(frame->wire_bytes()) +
                        " bytes exceeds max_frame_bytes " +
                        std::to_string(options_.max_frame_bytes));
  const std::lock_guard lock(mutex_);
  if (peers_[to_rank].failure) throw PeerError(*peers_[to_rank].failure);
  if (!sends_allowed_ || !loop_accepts_)
    throw Error("Transport::send() to rank " + std::to_string(to_rank) +
                (started_ ? ": the transport is shut down" : ": start() has not succeeded"));
  if (incoming_.empty()) incoming_since_ = RateLimiter::steady_seconds();
  incoming_.emplace_back(to_rank, std::move(frame));
  uv_async_send(&async_);
}

void TcpTransport::Impl::shutdown(double timeout_s) noexcept {
  {
    std::unique_lock lock(mutex_);
    if (closed_ || !loop_initialised_) return;
    if (started_ && loop_accepts_ && !shutdown_requested_) {
      sends_allowed_ = false;
      shutdown_requested_ = true;
      uv_async_send(&async_);
      const std::size_t others = peers_.size() - 1;
      const bool clean = changed_.wait_for(
          lock, std::chrono::duration<double>(std::max(0.0, timeout_s)),
          [&] { return count_done_locked() == others; });
      if (!clean) {
        std::string waiting;
        for (std::size_t r = 0; r < peers_.size(); ++r)
          if (r != options_.rank && !peers_[r].done)
            waiting += (waiting.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + " (" +
                       peers_[r].address + ")";
        spdlog::warn("net rank {}: shutdown timed out after {} s waiting for Goodbye from {}",
                     options_.rank, seconds_text(timeout_s), waiting);
      }
    }
  }
  stop_and_join();
}

void TcpTransport::Impl::stop_and_join() noexcept {
  {
    const std::lock_guard lock(mutex_);
    if (closed_ || !loop_initialised_) return;
    closed_ = true;
    sends_allowed_ = false;
    stop_requested_ = true;
    if (loop_accepts_ && thread_.joinable()) uv_async_send(&async_);
  }
  if (thread_.joinable()) {
    thread_.join();
  } else {
    close_all();  // the thread never started: close the handles here
    uv_run(&loop_, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop_) != 0)
      spdlog::error("net rank {}: libuv loop did not close cleanly", options_.rank);
  }
}

// ====================================================================== loop thread

void TcpTransport::Impl::run_loop() noexcept {
  uv_run(&loop_, UV_RUN_DEFAULT);
  // close_all() closed every handle and uv_run returned; anything left is a bug, close it anyway.
  while (uv_loop_close(&loop_) == UV_EBUSY) {
    uv_walk(
        &loop_,
        [](uv_handle_t* handle, void*) {
          if (!uv_is_closing(handle)) uv_close(handle, nullptr);
        },
        nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
  }
}

void TcpTransport::Impl::on_async(uv_async_t* handle) noexcept {
  auto* self = static_cast<Impl*>(handle->data);
  bool shutdown = false;
  bool stop = false;
  double since = 0;
  {
    const std::lock_guard lock(self->mutex_);
    self->draining_.swap(self->incoming_);
    since = self->incoming_since_;
    shutdown = self->shutdown_requested_;
    stop = self->stop_requested_;
  }
  if (self->stopping_) {
    self->draining_.clear();
    return;
  }
  for (auto& [rank, frame] : self->draining_) {
    Connection* connection = self->peers_[rank].connection;
    if (connection != nullptr && connection->established && !connection->closing())
      self->queue_frame(*connection, std::move(frame));
  }
  // The link time since the first of these frames was sent counts as backlogged: a real NIC
  // would have been sending them while this thread waited for a core.
  if (self->limiter_ && !self->ready_.empty()) self->limiter_->start_backlog(since);
  self->draining_.clear();  // keeps its capacity: no allocation per batch
  if (stop) {
    self->close_all();
    return;
  }
  if (shutdown && !self->shutting_down_) self->begin_shutdown();
  self->pump();
}

void TcpTransport::Impl::queue_frame(Connection& connection,
                                  std::unique_ptr<OutgoingFrame> frame) noexcept {
  connection.enqueue(std::move(frame));
  if (!connection.in_ready_list) {
    connection.in_ready_list = true;
    ready_.push_back(&connection);
  }
}

void TcpTransport::Impl::pump() noexcept {
  // The send cap's bucket may bank the link time this thread misses while frames wait (see
  // RateLimiter): it is backlogged from here until the ready list empties.
  if (limiter_ && !ready_.empty()) limiter_->start_backlog(RateLimiter::steady_seconds());
  while (!stopping_ && !ready_.empty()) {
    Connection* connection = ready_.front();
    if (connection->closing() || !connection->has_unissued()) {
      ready_.pop_front();
      connection->in_ready_list = false;
      continue;
    }
    std::size_t want = connection->front_remaining();
    if (limiter_) {
      want = std::min(want, kSliceBytes);
      if (limiter_->available() < want) {
        if (uv_is_active(reinterpret_cast<uv_handle_t*>(&pace_timer_)) == 0) {
          const double wait_ms = std::ceil(limiter_->seconds_until(want) * 1000.0);
          uv_timer_start(&pace_timer_, &Impl::on_pace,
                         static_cast<std::uint64_t>(std::max(1.0, wait_ms)), 0);
        }
        return;
      }
    }
    // Pop before writing: a failed write may close the connection and edit ready_.
    ready_.pop_front();
    connection->in_ready_list = false;
    if (limiter_) {
      limiter_->consume(connection->write_some(want));
    } else {
      while (connection->has_unissued() && !connection->closing())
        connection->write_some(connection->front_remaining());
    }
    if (!connection->closing() && connection->has_unissued()) {
      connection->in_ready_list = true;
      ready_.push_back(connection);
    }
  }
  if (limiter_) limiter_->end_backlog();  // nothing waits: an idle link banks nothing
}

void TcpTransport::Impl::on_pace(uv_timer_t* timer) noexcept {
  static_cast<Impl*>(timer->data)->pump();
}

// ---------------------------------------------------------------- dialing

void TcpTransport::Impl::dial(std::size_t rank) noexcept {
  if (stopping_) return;
  Connection* connection =
      Connection::make(&loop_, *this, Connection::Role::kDialer, rank, limits(true));
  peers_[rank].connection = connection;
  const int rc =
      connection->connect(reinterpret_cast<const sockaddr*>(&peers_[rank].socket_address));
  if (rc != 0) {
    close_connection(*connection);
    schedule_retry(rank);
  }
}

void TcpTransport::Impl::schedule_retry(std::size_t rank) noexcept {
  if (stopping_) return;
  Peer& peer = peers_[rank];
  uv_timer_start(&peer.retry_timer, &Impl::on_retry, peer.backoff_ms, 0);
  peer.backoff_ms = std::min(peer.backoff_ms * 2, kMaxBackoffMs);
}

void TcpTransport::Impl::on_retry(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Impl*>(timer->data);
  for (std::size_t r = 0; r < self->options_.rank; ++r)
    if (&self->peers_[r].retry_timer == timer) self->dial(r);
}

void TcpTransport::Impl::on_connected(Connection& connection, int status) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (status != 0 || connection.start_reading() != 0) {
    close_connection(connection);
    schedule_retry(rank);
    return;
  }
  try {
    queue_frame(connection, encode_hello(our_hello(), control_stage_));
  } catch (const std::exception& e) {
    fail_start(PeerError(rank, peers_[rank].address, std::string("cannot encode Hello: ") + e.what()));
    return;
  }
  pump();
}

// ---------------------------------------------------------------- accepting

void TcpTransport::Impl::on_new_connection(uv_stream_t* server, int status) noexcept {
  auto* self = static_cast<Impl*>(server->data);
  if (self->stopping_) return;
  if (status != 0) {
    spdlog::warn("net rank {}: accept failed: {}", self->options_.rank, uv_error_text(status));
    return;
  }
  Connection* connection = Connection::make(&self->loop_, *self, Connection::Role::kAcceptor,
                                            kNoRank, self->limits(true));
  if (uv_accept(server, connection->stream()) != 0 || connection->start_reading() != 0) {
    connection->close();
    return;
  }
  self->pending_inbound_.push_back(connection);
}

void TcpTransport::Impl::reject_inbound(Connection& connection, const std::string& why) noexcept {
  counters_.add_rejected_connection();
  spdlog::warn("net rank {}: rejected inbound connection from {}: {}", options_.rank,
               connection.remote_address(), why);
  close_connection(connection);
}

void TcpTransport::Impl::handle_hello(Connection& connection, const schema::Hello& hello,
                                   std::size_t wire) noexcept {
  const HelloFields theirs = decode_hello(hello);
  std::string reason = check_hello(our_hello(), theirs);
  const bool rank_valid = theirs.rank < peers_.size() && theirs.rank > options_.rank;
  bool duplicate = false;
  if (reason.empty() && peers_[theirs.rank].connection != nullptr) {
    reason = "rank " + std::to_string(theirs.rank) + " is already connected";
    duplicate = true;
  }
  if (!reason.empty()) {
    counters_.add_rejected_connection();
    counters_.add_received(CounterBook::kUnknownPeer, control_stage_, wire, 1);
    spdlog::error("net rank {}: refusing handshake from {} claiming rank {}: {}", options_.rank,
                  connection.remote_address(), theirs.rank, reason);
    // A real peer with a different config fails our start() too, once the Refuse is written.
    if (rank_valid && !duplicate) {
      connection.set_peer_rank(theirs.rank);
      connection.refusal = "refused its handshake: " + reason;
    }
    try {
      queue_frame(connection, encode_refuse(reason, control_stage_));
      pump();
    } catch (...) {
      close_connection(connection);
    }
    return;
  }
  connection.set_peer_rank(theirs.rank);
  counters_.add_received(theirs.rank, control_stage_, wire, 1);
  std::erase(pending_inbound_, &connection);
  peers_[theirs.rank].connection = &connection;
  try {
    queue_frame(connection, encode_hello_ack(options_.rank, control_stage_));
  } catch (...) {
    fail_start(PeerError(theirs.rank, peers_[theirs.rank].address, "cannot encode HelloAck"));
    return;
  }
  mark_connected(connection);
  pump();
}

void TcpTransport::Impl::handle_dialer_reply(Connection& connection, const schema::Header& header,
                                          std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  counters_.add_received(rank, control_stage_, wire, 1);
  if (header.body_type() == schema::Body::HelloAck) {
    mark_connected(connection);
    return;
  }
  std::string why;
  if (header.body_type() == schema::Body::Refuse) {
    const auto* reason = header.body_as_Refuse()->reason();
    why = "refused our handshake: " + (reason ? reason->str() : std::string("no reason given"));
  } else {
    why = std::string("expected HelloAck or Refuse, got ") + body_name(header.body_type());
  }
  close_connection(connection);
  fail_start(PeerError(rank, peers_[rank].address, why));
}

void TcpTransport::Impl::mark_connected(Connection& connection) noexcept {
  connection.established = true;
  connection.set_limits(limits(false));
  {
    const std::lock_guard lock(mutex_);
    peers_[connection.peer_rank()].connected = true;
  }
  changed_.notify_all();
  spdlog::debug("net rank {}: connected to rank {} ({})", options_.rank, connection.peer_rank(),
                peers_[connection.peer_rank()].address);
}

// ---------------------------------------------------------------- frames

void TcpTransport::Impl::on_bytes_read(Connection& /*connection*/, std::size_t bytes) noexcept {
  counters_.add_read_bytes(bytes);
}

void TcpTransport::Impl::on_frame(Connection& connection, const schema::Header& header,
                               Payload&& payload, std::size_t wire_bytes) noexcept {
  if (!connection.established) {
    if (connection.role() == Connection::Role::kDialer) {
      handle_dialer_reply(connection, header, wire_bytes);
    } else if (header.body_type() == schema::Body::Hello) {
      handle_hello(connection, *header.body_as_Hello(), wire_bytes);
    } else {
      reject_inbound(connection,
                     std::string("expected Hello, got ") + body_name(header.body_type()));
    }
    return;
  }
  const std::size_t rank = connection.peer_rank();
  switch (header.body_type()) {
    case schema::Body::Data: {
      const schema::Data* data = header.body_as_Data();
      counters_.add_received(rank, data->stage(), wire_bytes, 1);
      if (!on_message_) return;
      try {
        on_message_(rank, Message{data->stage(), data->kind(), data->key(), data->round(),
                                  std::move(payload)});
      } catch (const std::exception& e) {
        counters_.add_malformed_frame();
        spdlog::error("net rank {}: message handler threw on a frame from rank {} ({}): {}",
                      options_.rank, rank, peers_[rank].address, e.what());
      } catch (...) {
        counters_.add_malformed_frame();
        spdlog::error("net rank {}: message handler threw a non-exception on a frame from rank {}",
                      options_.rank, rank);
      }
      return;
    }
    case schema::Body::Goodbye:
      counters_.add_received(rank, control_stage_, wire_bytes, 1);
      connection.goodbye_received = true;
      maybe_finish_peer(connection);
      return;
    case schema::Body::Abort: {
      counters_.add_received(rank, control_stage_, wire_bytes, 1);
      const flatbuffers::String* reason = header.body_as_Abort()->reason();
      fail_peer(rank, "aborted the job: " + (reason != nullptr ? reason->str() : std::string("?")));
      return;
    }
    default:
      on_malformed(connection,
                   std::string("unexpected ") + body_name(header.body_type()) +
                       " after the handshake",
                   wire_bytes);
      return;
  }
}

void TcpTransport::Impl::on_malformed(Connection& connection, const std::string& why,
                                   std::size_t wire_bytes) noexcept {
  if (!connection.established) {
    if (connection.role() == Connection::Role::kAcceptor) {
      reject_inbound(connection, why);
    } else {
      const std::size_t rank = connection.peer_rank();
      close_connection(connection);
      fail_start(PeerError(rank, peers_[rank].address, "malformed handshake reply: " + why));
    }
    return;
  }
  const std::size_t rank = connection.peer_rank();
  counters_.add_malformed_frame();
  counters_.add_received(rank, CounterBook::kNoStage, wire_bytes, 0);
  spdlog::error("net rank {}: skipped a malformed frame of {} bytes from rank {} ({}): {}",
                options_.rank, wire_bytes, rank, peers_[rank].address, why);
}

void TcpTransport::Impl::on_broken(Connection& connection, int status,
                                const std::string& why) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (!connection.established) {
    if (connection.role() == Connection::Role::kAcceptor) {
      if (connection.refusal.empty()) {
        reject_inbound(connection, why);
      } else {  // the dialer read our Refuse and hung up before our write callback ran
        finish_refusal(connection);
      }
    } else if (status != 0) {  // the acceptor went away mid-handshake: dial again
      close_connection(connection);
      schedule_retry(rank);
    } else {
      close_connection(connection);
      fail_start(PeerError(rank, peers_[rank].address, "handshake failed: " + why));
    }
    return;
  }
  if (connection.goodbye_received) {  // the peer said Goodbye: its close is no failure
    close_connection(connection);
    mark_done(rank);
    return;
  }
  if (status == 0) {
    counters_.add_malformed_frame();
    spdlog::error("net rank {}: closing the connection to rank {} ({}): {}", options_.rank, rank,
                  peers_[rank].address, why);
  }
  fail_peer(rank, why);
}

void TcpTransport::Impl::on_written(Connection& connection, const OutgoingFrame& frame,
                                 std::size_t bytes, bool frame_done) noexcept {
  counters_.add_sent(connection.peer_rank(), frame.stage(), bytes, frame_done ? 1 : 0);
  if (!frame_done) return;
  if (frame.role() == FrameRole::kAbort) {
    {
      const std::lock_guard lock(mutex_);
      if (aborts_pending_ > 0) --aborts_pending_;
    }
    changed_.notify_all();
    return;
  }
  if (connection.closing()) return;  // counted above; no state change on a closing connection
  if (frame.role() == FrameRole::kGoodbye) {
    connection.goodbye_sent = true;
    maybe_finish_peer(connection);
  } else if (frame.role() == FrameRole::kRefuse) {
    finish_refusal(connection);
  }
}

void TcpTransport::Impl::finish_refusal(Connection& connection) noexcept {
  std::string refusal = std::move(connection.refusal);
  connection.refusal.clear();
  const std::size_t rank = connection.peer_rank();
  close_connection(connection);
  if (!refusal.empty()) fail_start(PeerError(rank, peers_[rank].address, refusal));
}

// ---------------------------------------------------------------- failure and shutdown

void TcpTransport::Impl::fail_start(PeerError error) noexcept {
  {
    const std::lock_guard lock(mutex_);
    if (started_ || start_error_ != nullptr) {
      spdlog::error("net rank {}: {}", options_.rank, error.what());
      return;
    }
    start_error_ = std::make_exception_ptr(error);
  }
  changed_.notify_all();
}

void TcpTransport::Impl::fail_peer(std::size_t rank, const std::string& why) noexcept {
  if (Connection* connection = peers_[rank].connection) close_connection(*connection);
  if (stopping_) return;
  PeerError error(rank, peers_[rank].address, why);
  bool during_start = false;
  {
    const std::lock_guard lock(mutex_);
    if (peers_[rank].failure) return;
    peers_[rank].failure = error;
    peers_[rank].done = true;
    if (!started_) {
      // start() keeps waiting for the others and names this peer among the missing ones when it
      // times out (a peer that exits because *another* peer is missing must not mask that one).
      peers_[rank].connected = false;
      during_start = true;
    }
  }
  changed_.notify_all();
  spdlog::error("net rank {}: {}", options_.rank, error.what());
  if (during_start || !on_failure_) return;
  try {
    on_failure_(error);
  } catch (const std::exception& e) {
    spdlog::error("net rank {}: failure handler threw: {}", options_.rank, e.what());
  } catch (...) {
    spdlog::error("net rank {}: failure handler threw a non-exception", options_.rank);
  }
}

void TcpTransport::Impl::begin_shutdown() noexcept {
  shutting_down_ = true;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (r == options_.rank) continue;
    Connection* connection = peers_[r].connection;
    if (connection != nullptr && connection->established && !connection->closing()) {
      try {
        queue_frame(*connection, encode_goodbye(control_stage_));
      } catch (...) {
        close_connection(*connection);
        mark_done(r);
      }
    } else {
      mark_done(r);
    }
  }
}

void TcpTransport::Impl::maybe_finish_peer(Connection& connection) noexcept {
  if (!connection.goodbye_sent || !connection.goodbye_received) return;
  const std::size_t rank = connection.peer_rank();
  close_connection(connection);
  mark_done(rank);
}

void TcpTransport::Impl::mark_done(std::size_t rank) noexcept {
  {
    const std::lock_guard lock(mutex_);
    peers_[rank].done = true;
  }
  changed_.notify_all();
}

void TcpTransport::Impl::close_connection(Connection& connection) noexcept {
  if (connection.in_ready_list) {
    std::erase(ready_, &connection);
    connection.in_ready_list = false;
  }
  std::erase(pending_inbound_, &connection);
  const std::size_t rank = connection.peer_rank();
  if (rank < peers_.size() && peers_[rank].connection == &connection)
    peers_[rank].connection = nullptr;
  connection.close();
}

void TcpTransport::Impl::close_all() noexcept {
  stopping_ = true;
  {
    const std::lock_guard lock(mutex_);
    loop_accepts_ = false;  // no uv_async_send after this point
  }
  auto close = [](auto* handle) {
    auto* h = reinterpret_cast<uv_handle_t*>(handle);
    if (!uv_is_closing(h)) uv_close(h, nullptr);
  };
  close(&async_);
  close(&listener_);
  close(&pace_timer_);
  for (std::size_t r = 0; r < options_.rank; ++r) close(&peers_[r].retry_timer);
  for (auto& peer : peers_)
    if (peer.connection != nullptr) close_connection(*peer.connection);
  while (!pending_inbound_.empty()) close_connection(*pending_inbound_.back());
  ready_.clear();
}

// ====================================================================== Transport

namespace {

TransportOptions validated(TransportOptions options) {
  if (options.peers.empty()) throw ConfigError("transport: peers is empty; expected >= 1 endpoint");
  if (options.rank >= options.peers.size())
    throw ConfigError("transport: rank " + std::to_string(options.rank) +
                      " out of range; expected < " + std::to_string(options.peers.size()) +
                      " (the number of peers)");
  for (std::size_t r = 0; r < options.peers.size(); ++r) {
    if (options.peers[r].host.empty())
      throw ConfigError("transport: peers[" + std::to_string(r) + "] has an empty host");
    for (std::size_t q = 0; q < r; ++q)
      if (options.peers[q] == options.peers[r])
        throw ConfigError("transport: peers[" + std::to_string(q) + "] and peers[" +
                          std::to_string(r) + "] are both " + options.peers[r].to_string());
  }
  if (!(options.connect_timeout_s > 0.0) || !std::isfinite(options.connect_timeout_s))
    throw ConfigError("transport: connect_timeout_s = " + std::to_string(options.connect_timeout_s) +
                      "; expected a finite number of seconds > 0");
  if (options.max_frame_bytes < 1024)
    throw ConfigError("transport: max_frame_bytes = " + std::to_string(options.max_frame_bytes) +
                      "; expected >= 1024");
  if (options.stages.size() > 255)
    throw ConfigError("transport: " + std::to_string(options.stages.size()) +
                      " stages; expected at most 255");
  for (const auto& stage : options.stages)
    if (stage == kControlStage)
      throw ConfigError("transport: stage name \"control\" is reserved for the transport");
  if (options.max_send_rate < 0.0 || !std::isfinite(options.max_send_rate))
    throw ConfigError("transport: max_send_rate = " + std::to_string(options.max_send_rate) +
                      "; expected bytes/s >= 0 (0 = unlimited)");
  return options;
}

}  // namespace

TcpTransport::TcpTransport(TransportOptions options)
    : impl_(std::make_unique<Impl>(validated(std::move(options)))) {}

TcpTransport::~TcpTransport() = default;

void TcpTransport::set_handlers(MessageHandler on_message, FailureHandler on_failure) {
  impl_->on_message_ = std::move(on_message);
  impl_->on_failure_ = std::move(on_failure);
}

void TcpTransport::start() { impl_->start(); }

void TcpTransport::send(std::size_t to_rank, Message message) {
  impl_->check_rank(to_rank);
  GRADMESH_CHECK_LT(std::size_t{message.stage}, impl_->options_.stages.size(),
                    "Message::stage must index TransportOptions::stages");
  impl_->enqueue_from_caller(to_rank, encode_data(message));
}

void TcpTransport::send_raw_for_testing(std::size_t to_rank, std::span<const std::byte> bytes) {
  impl_->check_rank(to_rank);
  impl_->enqueue_from_caller(to_rank, OutgoingFrame::raw(bytes, impl_->control_stage_));
}

void TcpTransport::shutdown(double timeout_s) noexcept { impl_->shutdown(timeout_s); }

void TcpTransport::close() noexcept { impl_->stop_and_join(); }

void TcpTransport::abort(const std::string& reason) noexcept { impl_->abort(reason); }

void TcpTransport::Impl::abort(const std::string& reason) noexcept {
  {
    std::unique_lock lock(mutex_);
    if (!closed_ && loop_initialised_ && started_ && loop_accepts_ && !stop_requested_) {
      sends_allowed_ = false;
      for (std::size_t r = 0; r < peers_.size(); ++r) {
        if (r == options_.rank || peers_[r].failure || peers_[r].done) continue;
        try {
          if (incoming_.empty()) incoming_since_ = RateLimiter::steady_seconds();
          incoming_.emplace_back(r, encode_abort(reason, control_stage_));
          ++aborts_pending_;
        } catch (...) {
          // Out of memory: that peer learns of the failure from the closed connection.
        }
      }
      uv_async_send(&async_);
      changed_.wait_for(lock, std::chrono::seconds(1), [&] { return aborts_pending_ == 0; });
    }
  }
  stop_and_join();
}

Counters TcpTransport::counters() const { return impl_->counters_.snapshot(); }

std::size_t TcpTransport::rank() const noexcept { return impl_->options_.rank; }

std::size_t TcpTransport::size() const noexcept { return impl_->options_.peers.size(); }

}  // namespace gradmesh::net

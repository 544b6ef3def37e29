// TcpTransport start-up: listening, accepting, the handshake (dialing: dialing.cpp).
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

// ====================================================================== start

void TcpTransport::Impl::start() {
  {
    const std::lock_guard lock(mutex_);
    if (loop_initialised_ || closed_) throw Error("Transport::start() called twice");
  }
  const std::size_t self = options_.rank;
  // A write to a peer that has just died must be an error on that connection (EPIPE), not a
  // SIGPIPE that ends this process without a word: libuv writes with write(2), which raises it.
  // Process-wide, and kept (a survivor goes on: README "When a peer fails").
  std::signal(SIGPIPE, SIG_IGN);
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    peers_[r].addresses = resolve_all(r, options_.peers[r], options_.resolver);
    peers_[r].dial_errors.assign(peers_[r].addresses.size(), std::string());
  }

  uv_loop_init(&loop_);
  loop_initialised_ = true;
  loop_.data = this;
  uv_async_init(&loop_, &async_, &Impl::on_async);
  async_.data = this;
  uv_timer_init(&loop_, &pace_timer_);
  pace_timer_.data = this;
  uv_timer_init(&loop_, &heartbeat_timer_);
  heartbeat_timer_.data = this;
  uv_timer_init(&loop_, &handshake_timer_);
  handshake_timer_.data = this;
  {
    const auto every = std::max<std::uint64_t>(
        10, static_cast<std::uint64_t>(options_.handshake_timeout_s * 1000.0 / 4.0));
    uv_timer_start(&handshake_timer_, &Impl::on_handshake_deadline, every, every);
  }
  if (options_.peer_timeout_s > 0.0) {
    const auto every = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(options_.peer_timeout_s * 1000.0 / 4.0));
    uv_timer_start(&heartbeat_timer_, &Impl::on_heartbeat, every, every);
  }
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (!dials(r)) continue;
    uv_timer_init(&loop_, &peers_[r].retry_timer);
    peers_[r].retry_timer.data = this;
    uv_timer_init(&loop_, &peers_[r].attempt_timer);
    peers_[r].attempt_timer.data = this;
  }
  if (options_.max_send_rate > 0.0)
    limiter_.emplace(options_.max_send_rate, RateLimiter::default_capacity(options_.max_send_rate),
                     &RateLimiter::steady_seconds,
                     RateLimiter::default_backlog_capacity(options_.max_send_rate));

  {
    const std::lock_guard lock(mutex_);
    loop_accepts_ = true;
  }
  try {
    listen_on_own_addresses();
  } catch (...) {
    stop_and_join();  // runs the loop once to close the handles
    throw;
  }
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (dials(r)) dial(r);  // before the thread exists: no race
  }
  thread_ = std::thread([this] { run_loop(); });

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options_.connect_timeout_s));
  std::unique_lock lock(mutex_);
  const std::size_t others = peers_.size() - 1;
  // A peer that connected and then failed (it died, or gave up) is named at once when every
  // other peer is connected: none of them can be what it gave up on. While one is missing,
  // start() waits for it and names both at the deadline.
  const auto failed_with_others_in = [&]() -> const PeerError* {
    const PeerError* failed = nullptr;
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (r == self || peers_[r].connected) continue;
      if (!peers_[r].failure) return nullptr;
      if (failed == nullptr) failed = &*peers_[r].failure;
    }
    return failed;
  };
  const bool finished = changed_.wait_until(lock, deadline, [&] {
    return start_error_ != nullptr || count_connected_locked() == others ||
           failed_with_others_in() != nullptr;
  });
  if (finished && start_error_ == nullptr && count_connected_locked() == others) {
    started_ = true;
    sends_allowed_ = true;
    return;
  }
  std::exception_ptr error = start_error_;
  if (error == nullptr) {
    if (const PeerError* failed = failed_with_others_in()) error = std::make_exception_ptr(*failed);
  }
  if (error == nullptr) {
    std::string missing;
    std::size_t first = kNoRank;
    std::size_t named = 0, unnamed = 0;  // a long peer list: the first kNamedMissing, then a count
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (r == self || peers_[r].connected) continue;
      // Name a never-connected rank first: a peer that failed may only have given up on it.
      if (first == kNoRank || (peers_[first].failure && !peers_[r].failure)) first = r;
      if (named == kNamedMissing) {
        ++unnamed;
        continue;
      }
      ++named;
      missing += (missing.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + " (" +
                 peers_[r].address + ")";
      if (peers_[r].failure)
        missing += " [connected, then failed: " + std::string(peers_[r].failure->what()) + "]";
      else if (!peers_[r].last_refusal.empty())
        missing += " [refused: " + peers_[r].last_refusal + "]";
      else if (const std::string tried = dial_errors_locked(r); !tried.empty())
        missing += " [could not connect to " + tried + "]";
    }
    if (unnamed > 0) missing += " and " + std::to_string(unnamed) + " more";
    error = std::make_exception_ptr(PeerError(first, peers_[first].address,
                                              "timed out after " +
                                                  seconds_text(options_.connect_timeout_s) +
                                                  " s waiting for peers: " + missing));
  }
  lock.unlock();
  stop_and_join();
  std::rethrow_exception(error);
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
  if (uv_accept(server, connection->stream()) != 0) {
    connection->close();
    return;
  }
  connection->accepted_ms = uv_now(&self->loop_);
  connection->remote_ip = connection->remote_ip_address();
  // Bounded state for strangers: a connection past a cap on handshakes in progress is closed
  // before it is read (it must be accepted to leave the listen backlog).
  const std::size_t peers = self->peers_.size();
  const std::size_t from_ip = static_cast<std::size_t>(
      std::count_if(self->pending_inbound_.begin(), self->pending_inbound_.end(),
                    [&](const Connection* c) { return c->remote_ip == connection->remote_ip; }));
  std::string why;
  if (self->pending_inbound_.size() >= 2 * peers + kExtraPendingHandshakes)
    why = std::to_string(self->pending_inbound_.size()) + " handshakes in progress already";
  else if (from_ip >= peers + kExtraPendingHandshakesPerAddress)
    why = std::to_string(from_ip) + " handshakes from " + connection->remote_ip +
          " in progress already";
  if (!why.empty()) {
    self->reject_inbound(*connection, why);
    return;
  }
  if (connection->start_reading() != 0) {
    connection->close();
    return;
  }
  self->pending_inbound_.push_back(connection);
}

void TcpTransport::Impl::on_handshake_deadline(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Impl*>(timer->data);
  if (self->stopping_) return;
  const std::uint64_t now = uv_now(&self->loop_);
  const auto limit_ms = static_cast<std::uint64_t>(self->options_.handshake_timeout_s * 1000.0);
  std::vector<Connection*> late;
  for (Connection* c : self->pending_inbound_)
    if (!c->closing() && now - std::min(now, c->accepted_ms) > limit_ms) late.push_back(c);
  for (Connection* c : late) {
    self->reject_inbound(*c, "handshake not finished within " +
                                 seconds_text(self->options_.handshake_timeout_s) +
                                 " s (net.handshake_timeout)");
  }
}

void TcpTransport::Impl::log_rejection(spdlog::level::level_enum level,
                                       const std::string& line) noexcept {
  counters_.add_rejected_connection();
  const auto left_out = rejection_log_.admit(uv_now(&loop_));
  if (!left_out) return;
  if (*left_out == 0) {
    spdlog::log(level, "net rank {}: {}", options_.rank, line);
  } else {
    spdlog::log(level,
                "net rank {}: {} (and {} more rejected connections in the last second "
                "or more, not logged: rejected_connections counts them all)",
                options_.rank, line, *left_out);
  }
}

void TcpTransport::Impl::reject_inbound(Connection& connection, const std::string& why) noexcept {
  log_rejection(spdlog::level::warn,
                "rejected inbound connection from " + connection.remote_address() + ": " + why);
  close_connection(connection);
}

void TcpTransport::Impl::refuse(Connection& connection, std::size_t claimed_rank,
                                const std::string& why, bool fails_start, bool retry) noexcept {
  const std::string rank =
      claimed_rank == kNoRank ? std::string("?") : std::to_string(claimed_rank);
  if (connection.role() == Connection::Role::kAcceptor) {
    log_rejection(spdlog::level::err, "refusing handshake from " + connection.remote_address() +
                                          " claiming rank " + rank + ": " + why);
  } else {
    spdlog::error("net rank {}: refusing rank {} ({}): {}", options_.rank, rank,
                  peers_[claimed_rank].address, why);
  }
  connection.step = Connection::Step::kRefused;
  if (claimed_rank < peers_.size()) {
    const std::lock_guard lock(mutex_);
    peers_[claimed_rank].last_refusal = why;
  }
  // A real peer with a different config (or secret) fails our start() too, once the Refuse is
  // written; an unproven claim of a rank does not.
  if (fails_start) {
    connection.set_peer_rank(claimed_rank);
    connection.refusal = "refused its handshake: " + why;
  }
  try {
    queue_frame(connection, encode_refuse(why, control_lane_, retry));
    pump();
  } catch (...) {
    finish_refusal(connection);
  }
}

void TcpTransport::Impl::handle_hello(Connection& connection, const schema::Hello& hello,
                                      std::size_t wire) noexcept {
  const HelloFields theirs = decode_hello(hello);
  if (theirs.view > options_.view) {
    // A node of a newer view (it rolled back: run_with_recovery) while this one is still
    // leaving its older view: not a mismatch, and nothing to fail; the dialer tries again.
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    refuse(connection, theirs.rank,
           "its view " + std::to_string(theirs.view) + " is newer than this node's " +
               std::to_string(options_.view) + " (this node is leaving it): dial again",
           /*fails_start=*/false, /*retry=*/true);
    return;
  }
  std::string reason = check_hello(our_hello(), theirs);
  const bool rank_valid = theirs.rank < peers_.size() && theirs.rank > options_.rank;
  bool duplicate = false;
  if (reason.empty() && theirs.rank != connection.peer_rank()) {
    reason = "Hello claims rank " + std::to_string(theirs.rank) + ", its Challenge rank " +
             std::to_string(connection.peer_rank());
    duplicate = true;  // not the rank it authenticated as: no reason to fail our start()
  }
  if (reason.empty() && peers_[theirs.rank].connection != nullptr) {
    reason = "rank " + std::to_string(theirs.rank) + " is already connected";
    duplicate = true;
  }
  if (!reason.empty()) {
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    refuse(connection, theirs.rank, reason, rank_valid && !duplicate);
    return;
  }
  if (reason.empty()) {
    bool retry = false;
    reason = rejoin_refusal(theirs.rank, theirs.rejoin, retry);
    if (!reason.empty()) {
      counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
      refuse(connection, theirs.rank, reason, false, retry);
      return;
    }
  }
  connection.set_peer_rank(theirs.rank);
  counters_.add_received(theirs.rank, control_lane_, wire, 1);
  std::erase(pending_inbound_, &connection);
  peers_[theirs.rank].connection = &connection;
  try {
    queue_frame(connection, encode_hello_ack(options_.rank, control_lane_));
  } catch (...) {
    fail_start(PeerError(theirs.rank, peers_[theirs.rank].address, "cannot encode HelloAck"));
    return;
  }
  if (theirs.rejoin) {
    // The restarted node takes its rank back: it is live again, and may fail again.
    const std::lock_guard lock(mutex_);
    peers_[theirs.rank].failure.reset();
    peers_[theirs.rank].done = false;
    peers_[theirs.rank].last_refusal.clear();
  }
  mark_connected(connection);
  pump();
  if (!theirs.rejoin) return;
  spdlog::warn("net rank {}: rank {} ({}) restarted and rejoined the job", options_.rank,
               theirs.rank, peers_[theirs.rank].address);
  if (!on_rejoin_) return;
  try {
    on_rejoin_(theirs.rank);
  } catch (const std::exception& e) {
    spdlog::error("net rank {}: rejoin handler threw: {}", options_.rank, e.what());
  } catch (...) {
    spdlog::error("net rank {}: rejoin handler threw a non-exception", options_.rank);
  }
}

std::string TcpTransport::Impl::rejoin_refusal(std::size_t rank, bool rejoin,
                                               bool& retry) noexcept {
  retry = false;
  const std::lock_guard lock(mutex_);
  const bool failed = peers_[rank].failure.has_value();
  if (!rejoin) {
    if (!failed || !started_) return {};
    return "rank " + std::to_string(rank) +
           " failed earlier in this job; a restarted node "
           "takes its rank back with gradmesh-node --rejoin";
  }
  if (!started_ || shutdown_requested_ || shutting_down_)
    return "this node is not running a job it can be rejoined in (starting or shutting down)";
  if (!failed || peers_[rank].connection != nullptr) {
    retry = true;  // its old connection has not failed here yet (a hung peer takes peer_timeout)
    return "rank " + std::to_string(rank) + " is still live here: dial again";
  }
  return {};
}

void TcpTransport::Impl::handle_dialer_reply(Connection& connection, const schema::Header& header,
                                             std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  counters_.add_received(rank, control_lane_, wire, 1);
  if (header.body_type() == schema::Body::HelloAck) {
    mark_connected(connection);
    return;
  }
  std::string why;
  if (header.body_type() == schema::Body::Refuse && header.body_as_Refuse()->retry()) {
    const auto* reason = header.body_as_Refuse()->reason();
    const std::string why_retry = reason != nullptr ? reason->str() : std::string();
    spdlog::debug("net rank {}: rank {} ({}) asks us to dial again ({})", options_.rank, rank,
                  peers_[rank].address, why_retry);
    {
      const std::lock_guard lock(mutex_);  // named if start() times out
      peers_[rank].last_refusal = why_retry;
    }
    close_connection(connection);
    schedule_retry(rank);
    return;
  }
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
  connection.last_heard_ms = connection.last_written_ms = uv_now(&loop_);
  connection.set_limits(limits(false));
  apply_fragment_bytes(connection);
  Peer& peer = peers_[connection.peer_rank()];
  peer.liveness.reset();  // a new connection: no silence yet
  {
    const std::lock_guard lock(mutex_);
    peers_[connection.peer_rank()].connected = true;
  }
  changed_.notify_all();
  spdlog::debug("net rank {}: connected to rank {} ({})", options_.rank, connection.peer_rank(),
                peers_[connection.peer_rank()].address);
}

}  // namespace gradmesh::net

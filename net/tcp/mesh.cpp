// TcpTransport start-up and the handshake's end: start(), inbound rejections and refusals, the
// Hello (authentication: authenticate.cpp; dialing and accepting: net/tcp/dialer.h, listener.h).
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
  for (std::size_t r = 0; r < peers_.size(); ++r)
    peers_[r].set_addresses(resolve_all(r, options_.peers[r], options_.resolver));

  uv_loop_init(&loop_);
  loop_initialised_ = true;
  loop_.data = this;
  uv_async_init(&loop_, &async_, &Impl::on_async);
  async_.data = this;
  send_queue_.open(&loop_, options_.max_send_rate);
  liveness_.open(&loop_);  // starts the heartbeat timer
  listener_.open(&loop_);  // starts the handshake deadline's timer
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (!dials(r)) continue;
    peers_[r].make_dialer(*this, mutex_, self, r).open(&loop_);
  }

  {
    const std::lock_guard lock(mutex_);
    loop_accepts_ = true;
  }
  try {
    listener_.listen(peers_[self].addresses(), peers_[self].address());
  } catch (...) {
    stop_and_join();  // runs the loop once to close the handles
    throw;
  }
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (dials(r)) peers_[r].dialer()->dial();  // before the thread exists: no race
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
      if (r == self || peers_[r].connected_locked()) continue;
      const PeerError* failure = peers_[r].failure_locked();
      if (failure == nullptr) return nullptr;
      if (failed == nullptr) failed = failure;
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
      if (r == self || peers_[r].connected_locked()) continue;
      // Name a never-connected rank first: a peer that failed may only have given up on it.
      if (first == kNoRank || (peers_[first].failure_locked() && !peers_[r].failure_locked()))
        first = r;
      if (named == kNamedMissing) {
        ++unnamed;
        continue;
      }
      ++named;
      missing += (missing.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + " (" +
                 peers_[r].address() + ")";
      if (const PeerError* failure = peers_[r].failure_locked())
        missing += " [connected, then failed: " + std::string(failure->what()) + "]";
      else if (!peers_[r].last_refusal_locked().empty())
        missing += " [refused: " + peers_[r].last_refusal_locked() + "]";
      else if (const std::string tried = peers_[r].dial_errors_locked(); !tried.empty())
        missing += " [could not connect to " + tried + "]";
    }
    if (unnamed > 0) missing += " and " + std::to_string(unnamed) + " more";
    error = std::make_exception_ptr(PeerError(first, peers_[first].address(),
                                              "timed out after " +
                                                  seconds_text(options_.connect_timeout_s) +
                                                  " s waiting for peers: " + missing));
  }
  lock.unlock();
  stop_and_join();
  std::rethrow_exception(error);
}

// ---------------------------------------------------------------- rejections and refusals

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
  if (connection.role() == Connection::Role::kAcceptor && retry) {
    // The protocol's "dial again" (a peer already in a newer view, a rejoin not yet due): a
    // peer of this job at the wrong moment, not a rejected connection, so not counted (the
    // count then depended on how fast the nodes reached a rollback).
    spdlog::info("net rank {}: asking {} (rank {}) to dial again: {}", options_.rank,
                 connection.remote_address(), rank, why);
  } else if (connection.role() == Connection::Role::kAcceptor) {
    log_rejection(spdlog::level::err, "refusing handshake from " + connection.remote_address() +
                                          " claiming rank " + rank + ": " + why);
  } else {
    spdlog::error("net rank {}: refusing rank {} ({}): {}", options_.rank, rank,
                  peers_[claimed_rank].address(), why);
  }
  connection.step = Connection::Step::kRefused;
  if (claimed_rank < peers_.size()) {
    const std::lock_guard lock(mutex_);
    peers_[claimed_rank].set_last_refusal_locked(why);
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
  if (reason.empty() && peers_[theirs.rank].connection() != nullptr) {
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
  listener_.handshake_done(connection);
  peers_[theirs.rank].set_connection(&connection);
  try {
    queue_frame(connection, encode_hello_ack(options_.rank, control_lane_));
  } catch (...) {
    fail_start(PeerError(theirs.rank, peers_[theirs.rank].address(), "cannot encode HelloAck"));
    return;
  }
  if (theirs.rejoin) {
    // The restarted node takes its rank back: it is live again, and may fail again.
    const std::lock_guard lock(mutex_);
    peers_[theirs.rank].rejoined_locked();
  }
  mark_connected(connection);
  pump();
  if (!theirs.rejoin) return;
  spdlog::warn("net rank {}: rank {} ({}) restarted and rejoined the job", options_.rank,
               theirs.rank, peers_[theirs.rank].address());
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
  const bool failed = peers_[rank].failure_locked() != nullptr;
  if (!rejoin) {
    if (!failed || !started_) return {};
    return "rank " + std::to_string(rank) +
           " failed earlier in this job; a restarted node "
           "takes its rank back with gradmesh-node --rejoin";
  }
  if (!started_ || shutdown_requested_ || shutting_down_)
    return "this node is not running a job it can be rejoined in (starting or shutting down)";
  if (!failed || peers_[rank].connection() != nullptr) {
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
                  peers_[rank].address(), why_retry);
    {
      const std::lock_guard lock(mutex_);  // named if start() times out
      peers_[rank].set_last_refusal_locked(why_retry);
    }
    close_connection(connection);
    peers_[rank].dialer()->schedule_retry();
    return;
  }
  if (header.body_type() == schema::Body::Refuse) {
    const auto* reason = header.body_as_Refuse()->reason();
    why = "refused our handshake: " + (reason ? reason->str() : std::string("no reason given"));
  } else {
    why = std::string("expected HelloAck or Refuse, got ") + body_name(header.body_type());
  }
  close_connection(connection);
  fail_start(PeerError(rank, peers_[rank].address(), why));
}

void TcpTransport::Impl::mark_connected(Connection& connection) noexcept {
  connection.established = true;
  connection.last_heard_ms = connection.last_written_ms = uv_now(&loop_);
  connection.set_limits(limits(false));
  apply_fragment_bytes(connection);
  PeerLink& peer = peers_[connection.peer_rank()];
  peer.liveness().reset();  // a new connection: no silence yet
  {
    const std::lock_guard lock(mutex_);
    peer.set_connected_locked(true);
  }
  changed_.notify_all();
  spdlog::debug("net rank {}: connected to rank {} ({})", options_.rank, connection.peer_rank(),
                peer.address());
}

}  // namespace gradmesh::net

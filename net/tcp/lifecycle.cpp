// TcpTransport lifecycle: peer failure, shutdown, closing.
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

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

void TcpTransport::Impl::fail_peer(std::size_t rank, const std::string& why,
                                   std::optional<std::size_t> failed_peer) noexcept {
  if (Connection* connection = peers_[rank].connection()) close_connection(*connection);
  if (stopping_) return;
  // What another peer told of this one (a ConnectionNotice) is the likelier cause: say it too.
  const std::string& notice = peers_[rank].notice();
  PeerError error(rank, peers_[rank].address(), notice.empty() ? why : why + " (" + notice + ")",
                  failed_peer);
  bool during_start = false;
  {
    const std::lock_guard lock(mutex_);
    if (!peers_[rank].fail_locked(error)) return;
    if (!started_) {
      // start() keeps waiting for the others and names this peer among the missing ones when it
      // times out (a peer that exits because *another* peer is missing must not mask that one).
      peers_[rank].set_connected_locked(false);
      during_start = true;
    }
  }
  changed_.notify_all();
  spdlog::error("net rank {}: {}", options_.rank, error.what());
  if (!during_start && on_failure_) {
    try {
      on_failure_(error);
    } catch (const std::exception& e) {
      spdlog::error("net rank {}: failure handler threw: {}", options_.rank, e.what());
    } catch (...) {
      spdlog::error("net rank {}: failure handler threw a non-exception", options_.rank);
    }
  }
  // A failed peer answers no LivenessQuery: it counts as one that does not hear.
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].liveness().peer_failed(rank) == tcp::LivenessQuery::Answer::kSettled) {
      settle_query(r);
    }
  }
}

void TcpTransport::Impl::settle_query(std::size_t rank) noexcept {
  const Connection* silent = peers_[rank].connection();
  if (silent == nullptr || !silent->established || silent->closing()) return;
  const std::uint64_t now = uv_now(&loop_);
  // Every answer is in and none heard it: failed now.
  fail_silent(rank, now - std::min(now, silent->last_heard_ms),
              ": hung, stopped or cut off; no other peer hears it either");
}

void TcpTransport::Impl::on_heartbeat(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Impl*>(timer->data);
  if (self->stopping_ || self->shutting_down_) return;  // shutdown has its own timeout
  const std::uint64_t now = uv_now(&self->loop_);
  const std::uint64_t timeout_ms = self->peer_timeout_ms();
  const std::uint64_t every_ms = std::max<std::uint64_t>(1, timeout_ms / 4);
  for (std::size_t r = 0; r < self->peers_.size(); ++r) {
    Connection* connection = self->peers_[r].connection();
    if (r == self->options_.rank || connection == nullptr || !connection->established ||
        connection->closing()) {
      continue;
    }
    // A peer that said Goodbye is shutting down cleanly and stops its heartbeats (as this node
    // does once it shuts down: shutdown() has its own timeout).
    const std::uint64_t direct_ms = now - std::min(now, connection->last_heard_ms);
    if (!connection->goodbye_received && self->check_silence(r, now, direct_ms)) continue;
    if (now - std::min(now, connection->last_written_ms) >= every_ms) {
      try {
        self->queue_frame(*connection, encode_heartbeat(self->control_lane_));
        connection->last_written_ms = now;  // queued: the next one a period later at the earliest
      } catch (...) {
        spdlog::error("net rank {}: cannot queue a heartbeat to rank {}", self->options_.rank, r);
      }
    }
  }
  self->pump();
}

bool TcpTransport::Impl::check_silence(std::size_t rank, std::uint64_t now,
                                       std::uint64_t direct_ms) noexcept {
  PeerLink& peer = peers_[rank];
  const std::uint64_t timeout_ms = peer_timeout_ms();
  if (direct_ms > kMaxVouchedTimeouts * timeout_ms) {
    const std::string bound = std::to_string(kMaxVouchedTimeouts) + " x net.peer_timeout";
    fail_silent(
        rank, direct_ms,
        peer.liveness().vouched()
            ? ", though other peers heard from it: past " + bound +
                  " its link to this node is taken for broken"
            : ": hung, stopped or cut off; the other peers' answers did not come within " + bound);
    return true;
  }
  const std::uint64_t silent_ms = std::min(direct_ms, peer.liveness().silent_by_reports_ms(now));
  if (silent_ms <= timeout_ms) {
    peer.liveness().close();  // heard (or vouched for) again: a query still out is moot
    return false;
  }
  if (!peer.liveness().open()) {
    if (query_liveness(rank, now)) return false;
    fail_silent(rank, direct_ms, ": hung, stopped or cut off");
    return true;
  }
  // The answers are still coming: on a slow link they wait behind bulk bytes too (seen: over
  // 8 s at 1 Mbit/s). A peer that fails meanwhile counts as an answer (fail_peer).
  return false;
}

void TcpTransport::Impl::fail_silent(std::size_t rank, std::uint64_t direct_ms,
                                     const std::string& why) noexcept {
  peers_[rank].liveness().close();
  fail_peer(rank, "sent nothing for " + seconds_text(static_cast<double>(direct_ms) / 1e3) +
                      " s (net.peer_timeout = " + seconds_text(options_.peer_timeout_s) + " s)" +
                      why);
}

bool TcpTransport::Impl::query_liveness(std::size_t rank, std::uint64_t now) noexcept {
  const std::uint64_t timeout_ms = peer_timeout_ms();
  std::size_t asked = 0;
  std::vector<bool> asking(peers_.size(), false);
  for (std::size_t q = 0; q < peers_.size(); ++q) {
    Connection* other = peers_[q].connection();
    if (q == rank || q == options_.rank || other == nullptr || !other->established ||
        other->closing() || other->goodbye_received ||
        now - std::min(now, other->last_heard_ms) > timeout_ms) {
      continue;  // only a peer this node hears can answer in time
    }
    try {
      queue_frame(*other, encode_liveness_query(rank, control_lane_));
      asking[q] = true;
      ++asked;
    } catch (...) {
      spdlog::error("net rank {}: cannot queue a liveness query to rank {}", options_.rank, q);
    }
  }
  if (asked == 0) return false;
  PeerLink& peer = peers_[rank];
  peer.liveness().start(now, std::move(asking));
  spdlog::info(
      "net rank {}: peer rank {} ({}) has sent nothing for {} s (net.peer_timeout = {} "
      "s); asking the {} other peer(s) it hears whether they hear it",
      options_.rank, rank, peer.address(),
      seconds_text(static_cast<double>(now - std::min(now, peer.connection()->last_heard_ms)) /
                   1e3),
      seconds_text(options_.peer_timeout_s), asked);
  return true;
}

bool TcpTransport::Impl::accept_liveness_frame(Connection& connection, const char* kind,
                                               std::size_t about, bool about_allowed,
                                               std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  if (about >= peers_.size() || !about_allowed) {
    on_malformed(connection,
                 std::string(kind) + " about rank " + std::to_string(about) + " from rank " +
                     std::to_string(from) + " (" + std::to_string(peers_.size()) + " ranks)",
                 wire_bytes);
    return false;
  }
  counters_.add_received(from, control_lane_, wire_bytes, 1);
  return true;
}

void TcpTransport::Impl::on_liveness_query(Connection& connection,
                                           const schema::LivenessQuery& query,
                                           std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  const std::size_t about = query.rank();
  if (!accept_liveness_frame(connection, "LivenessQuery", about, about != from, wire_bytes)) return;
  std::uint32_t silent_ms = kNotHeardMs;
  const std::uint64_t now = uv_now(&loop_);
  if (about == options_.rank) {
    silent_ms = 0;  // this node hears itself
  } else if (const Connection* c = peers_[about].connection();
             c != nullptr && c->established && !c->closing()) {
    silent_ms = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(now - std::min(now, c->last_heard_ms), kNotHeardMs - 1));
  }
  try {
    queue_frame(connection, encode_liveness_report(about, silent_ms, control_lane_));
  } catch (...) {
    spdlog::error("net rank {}: cannot queue a liveness report to rank {}", options_.rank, from);
  }
  pump();
}

void TcpTransport::Impl::on_liveness_report(Connection& connection,
                                            const schema::LivenessReport& report,
                                            std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  const std::size_t about = report.rank();
  if (!accept_liveness_frame(connection, "LivenessReport", about,
                             about != from && about != options_.rank, wire_bytes)) {
    return;
  }
  const tcp::LivenessQuery::Answer answer =
      peers_[about].liveness().report(from, report.silent_ms(), uv_now(&loop_), peer_timeout_ms());
  if (answer == tcp::LivenessQuery::Answer::kVouched) {
    spdlog::info(
        "net rank {}: rank {} heard peer rank {} {} s ago: its link to this node is slow, "
        "not the peer failed",
        options_.rank, from, about, seconds_text(static_cast<double>(report.silent_ms()) / 1e3));
  } else if (answer == tcp::LivenessQuery::Answer::kSettled) {
    settle_query(about);
  }
}

void TcpTransport::Impl::on_connection_notice(Connection& connection,
                                              const schema::ConnectionNotice& notice,
                                              std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  const std::size_t about = notice.rank();
  // A notice about this node could only come over the connection being closed: none is sent.
  if (!accept_liveness_frame(connection, "ConnectionNotice", about,
                             about != from && about != options_.rank, wire_bytes)) {
    return;
  }
  try {
    const std::string reason = notice.reason() != nullptr ? notice.reason()->str() : "?";
    spdlog::warn("net rank {}: rank {} ({}) closes its connection to rank {} ({}): {}",
                 options_.rank, from, peers_[from].address(), about, peers_[about].address(),
                 reason);
    peers_[about].set_notice("rank " + std::to_string(from) + " (" + peers_[from].address() +
                             ") closed its connection to it first: " + reason);
  } catch (...) {  // out of memory: the notice is lost, the failure stands on its own
  }
}

void TcpTransport::Impl::tell_peers_why(std::size_t rank, const std::string& why) noexcept {
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (r == options_.rank || r == rank) continue;
    Connection* connection = peers_[r].connection();
    if (connection == nullptr || !connection->established || connection->closing()) continue;
    try {
      queue_frame(*connection, encode_connection_notice(rank, why, control_lane_));
    } catch (...) {
      spdlog::error("net rank {}: cannot queue a connection notice to rank {}", options_.rank, r);
    }
  }
  pump();
}

void TcpTransport::Impl::begin_shutdown() noexcept {
  shutting_down_ = true;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (r == options_.rank) continue;
    Connection* connection = peers_[r].connection();
    if (connection != nullptr && connection->established && !connection->closing()) {
      try {
        queue_frame(*connection, encode_goodbye(control_lane_));
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
    peers_[rank].set_done_locked();
  }
  changed_.notify_all();
}

void TcpTransport::Impl::close_connection(Connection& connection) noexcept {
  send_queue_.forget(connection);
  listener_.forget(connection);
  const std::size_t rank = connection.peer_rank();
  if (rank < peers_.size() && peers_[rank].connection() == &connection)
    peers_[rank].set_connection(nullptr);
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
  listener_.close_handles();  // the listening sockets and the handshake deadline's timer
  send_queue_.close();
  close(&heartbeat_timer_);
  for (auto& peer : peers_)
    if (Dialer* dialer = peer.dialer()) dialer->close();
  for (auto& peer : peers_)
    if (peer.connection() != nullptr) close_connection(*peer.connection());
  listener_.close_pending();
}

}  // namespace gradmesh::net

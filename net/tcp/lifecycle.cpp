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
  if (Connection* connection = peers_[rank].connection) close_connection(*connection);
  if (stopping_) return;
  PeerError error(rank, peers_[rank].address, why, failed_peer);
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

void TcpTransport::Impl::on_heartbeat(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Impl*>(timer->data);
  if (self->stopping_ || self->shutting_down_) return;  // shutdown has its own timeout
  const std::uint64_t now = uv_now(&self->loop_);
  const double timeout_s = self->options_.peer_timeout_s;
  const auto timeout_ms = static_cast<std::uint64_t>(timeout_s * 1000.0);
  const std::uint64_t every_ms = std::max<std::uint64_t>(1, timeout_ms / 4);
  for (std::size_t r = 0; r < self->peers_.size(); ++r) {
    Connection* connection = self->peers_[r].connection;
    if (r == self->options_.rank || connection == nullptr || !connection->established ||
        connection->closing()) {
      continue;
    }
    // A peer that said Goodbye is shutting down cleanly and stops its heartbeats (as this node
    // does once it shuts down: shutdown() has its own timeout).
    const std::uint64_t silent_ms = now - std::min(now, connection->last_heard_ms);
    if (silent_ms > timeout_ms && !connection->goodbye_received) {
      self->fail_peer(r, "sent nothing for " + seconds_text(static_cast<double>(silent_ms) / 1e3) +
                             " s (net.peer_timeout = " + seconds_text(timeout_s) +
                             " s): hung, stopped or cut off");
      continue;
    }
    if (now - std::min(now, connection->last_written_ms) >= every_ms) {
      try {
        self->queue_frame(*connection, encode_heartbeat(self->control_stage_));
        connection->last_written_ms = now;  // queued: the next one a period later at the earliest
      } catch (...) {
        spdlog::error("net rank {}: cannot queue a heartbeat to rank {}", self->options_.rank, r);
      }
    }
  }
  self->pump();
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
  for (auto& listener : listeners_) close(listener.get());
  close(&pace_timer_);
  close(&heartbeat_timer_);
  close(&handshake_timer_);
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (!dials(r)) continue;
    close(&peers_[r].retry_timer);
    close(&peers_[r].attempt_timer);
    for (Connection* attempt : peers_[r].attempts) close_connection(*attempt);
    peers_[r].attempts.clear();
  }
  for (auto& peer : peers_)
    if (peer.connection != nullptr) close_connection(*peer.connection);
  while (!pending_inbound_.empty()) close_connection(*pending_inbound_.back());
  ready_.clear();
}


}  // namespace gradmesh::net

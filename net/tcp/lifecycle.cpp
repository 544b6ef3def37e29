// TcpTransport lifecycle: peer failure, shutdown, closing (liveness: net/tcp/liveness.h).
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
  liveness_.peer_failed(rank);  // it answers no LivenessQuery: one that does not hear
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
  liveness_.close();
  for (auto& peer : peers_)
    if (Dialer* dialer = peer.dialer()) dialer->close();
  for (auto& peer : peers_)
    if (peer.connection() != nullptr) close_connection(*peer.connection());
  listener_.close_pending();
}

}  // namespace gradmesh::net

// TcpTransport sending: callers' sends, the loop thread, the send queue and its pacing.
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

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


}  // namespace gradmesh::net

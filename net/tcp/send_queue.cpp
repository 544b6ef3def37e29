// TcpTransport sending, the caller's side and the loop thread's wake-up: callers' sends and
// settings (lane weights, link rates, test hooks) go to the loop thread under mutex_ (on_async);
// which frame goes next and how fast is the SendScheduler's (net/tcp/send_scheduler.h).
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
  peers_[to_rank].throw_if_failed_locked();
  if (!sends_allowed_ || !loop_accepts_)
    throw Error("Transport::send() to rank " + std::to_string(to_rank) +
                (started_ ? ": the transport is shut down" : ": start() has not succeeded"));
  if (incoming_.empty()) incoming_since_ = RateLimiter::steady_seconds();
  incoming_.emplace_back(to_rank, std::move(frame));
  uv_async_send(&async_);
}

void TcpTransport::Impl::set_lane_weights(std::vector<double> weights) {
  check_lane_weights(weights, options_.lanes.size());
  const std::lock_guard lock(mutex_);
  incoming_weights_ = std::move(weights);
  if (loop_accepts_) uv_async_send(&async_);  // else the first on_async after start() applies them
}

void TcpTransport::Impl::set_link_rates(std::vector<double> bytes_per_second) {
  const std::size_t n = peers_.size();
  const double sharing = static_cast<double>(std::max<std::size_t>(1, n - 1));
  std::vector<std::size_t> fragments(n, 0);
  for (std::size_t r = 0; r < n && r < bytes_per_second.size(); ++r) {
    double rate = bytes_per_second[r];
    if (r == options_.rank || !(rate > 0) || !std::isfinite(rate) || options_.peer_timeout_s <= 0)
      continue;
    if (options_.max_send_rate > 0) rate = std::min(rate, options_.max_send_rate);
    const double bytes = rate / sharing * options_.peer_timeout_s * kFragmentShare;
    fragments[r] = static_cast<std::size_t>(
        std::clamp(bytes, static_cast<double>(kMinFragmentBytes), static_cast<double>(1u << 31)));
  }
  std::size_t smallest = 0, largest = 0;
  for (const std::size_t f : fragments) {
    if (f == 0) continue;
    smallest = smallest == 0 ? f : std::min(smallest, f);
    largest = std::max(largest, f);
  }
  if (smallest > 0 && smallest < kMaxBytesInFlight * 64) {  // a cut that can happen in practice
    spdlog::info(
        "net rank {}: data frames go in fragments of {}-{} KB, so that one holds a link "
        "for at most an eighth of net.peer_timeout ({} s) at its measured rate shared "
        "by {} peers (control frames go between them)",
        options_.rank, smallest / 1000, largest / 1000, options_.peer_timeout_s, n - 1);
  }
  const std::lock_guard lock(mutex_);
  fragment_bytes_ = std::move(fragments);
  fragments_changed_ = true;
  if (loop_accepts_) uv_async_send(&async_);  // else the first on_async after start() applies them
}

std::size_t TcpTransport::Impl::fragment_bytes(std::size_t rank) const {
  const std::lock_guard lock(mutex_);
  return rank < fragment_bytes_.size() ? fragment_bytes_[rank] : 0;
}

void TcpTransport::Impl::pause_reading(std::size_t rank, bool paused) {
  const std::lock_guard lock(mutex_);
  incoming_pauses_.emplace_back(rank, paused);
  if (loop_accepts_) uv_async_send(&async_);
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
      const bool clean =
          changed_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_s)),
                            [&] { return count_done_locked() == others; });
      if (!clean) {
        std::string waiting;
        for (std::size_t r = 0; r < peers_.size(); ++r)
          if (r != options_.rank && !peers_[r].done_locked())
            waiting += (waiting.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + " (" +
                       peers_[r].address() + ")";
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
  std::optional<std::vector<double>> weights;
  std::vector<std::pair<std::size_t, bool>> pauses;
  bool fragments_changed = false;
  {
    const std::lock_guard lock(self->mutex_);
    fragments_changed = std::exchange(self->fragments_changed_, false);
    self->draining_.swap(self->incoming_);
    weights.swap(self->incoming_weights_);
    pauses.swap(self->incoming_pauses_);
    since = self->incoming_since_;
    shutdown = self->shutdown_requested_;
    stop = self->stop_requested_;
  }
  if (self->stopping_) {
    self->draining_.clear();
    return;
  }
  if (weights) self->send_queue_.set_weights(*weights);
  if (fragments_changed) {
    for (tcp::PeerLink& peer : self->peers_)
      if (peer.connection() != nullptr && peer.connection()->established)
        self->apply_fragment_bytes(*peer.connection());
  }
  for (const auto& [rank, paused] : pauses) {
    Connection* connection = self->peers_[rank].connection();
    if (connection != nullptr && connection->established && !connection->closing())
      (void)connection->set_reading_paused(paused);
  }
  for (auto& [rank, frame] : self->draining_) {
    Connection* connection = self->peers_[rank].connection();
    if (connection != nullptr && connection->established && !connection->closing())
      self->queue_frame(*connection, std::move(frame));
  }
  // The link time since the first of these frames was sent counts as backlogged: a real NIC
  // would have been sending them while this thread waited for a core.
  self->send_queue_.start_backlog(since);
  self->draining_.clear();  // keeps its capacity: no allocation per batch
  if (stop) {
    self->close_all();
    return;
  }
  if (shutdown && !self->shutting_down_) self->begin_shutdown();
  self->pump();
}

void TcpTransport::Impl::apply_fragment_bytes(Connection& connection) noexcept {
  std::size_t bytes = 0;
  {
    const std::lock_guard lock(mutex_);
    if (connection.peer_rank() < fragment_bytes_.size())
      bytes = fragment_bytes_[connection.peer_rank()];
  }
  connection.set_fragment_bytes(bytes);
}

void TcpTransport::Impl::on_writable(Connection& /*connection*/) noexcept { pump(); }

}  // namespace gradmesh::net

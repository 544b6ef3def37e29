// TcpTransport sending: callers' sends, the loop thread, the send queue, its scheduling and pacing.
//
// Which frame goes next (pump() and choose()): every connection with bytes to write and fewer than
// kMaxBytesInFlight bytes in libuv's write queue offers candidates (net/tcp/write_queue.h: its
// partly written frame, else its queue's best frame per lane). A control frame goes first; among
// data frames the lane with the least start-time-fair-queuing virtual time wins
// (net/lane_scheduler.h: the link is shared by the lanes' weights, Poseidon arXiv'15 sec.
// 4.3.3), ties by lower priority, then round-robin over connections.
//  - Under the send cap the winner issues one slice (kSliceBytes) when the token bucket allows it;
//    the next slice is chosen again.
//  - Uncapped the winner issues the rest of its frame in one uv_write: the socket takes as much
//    per syscall as before priorities existed (bench/tcp_throughput: no loss; 64 KiB slices cost
//    ~25% of loopback throughput on this VM, a syscall and a wake-up a slice). A connection
//    over kMaxBytesInFlight waits for a write completion (on_writable pumps again), so libuv's
//    FIFO, where priority no longer acts, holds at most that plus one frame.
//  - Frames are written a fragment at a time: with link rates given (set_link_rates()) a data frame
//    longer than an eighth of the peer timeout at its link's share goes cut (OutgoingFrame::
//    fragment), a control frame goes between two fragments, and the in-flight bound drops to one
//    fragment, so a heartbeat, a liveness answer or an Abort waits at most about a quarter of the
//    peer timeout behind data on a slow link instead of a whole multi-MB frame.
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
  if (weights) {
    self->scheduler_.set_weights(*weights);
    self->share_by_lane_ = true;
  }
  if (fragments_changed) {
    for (Peer& peer : self->peers_)
      if (peer.connection != nullptr && peer.connection->established)
        self->apply_fragment_bytes(*peer.connection);
  }
  for (const auto& [rank, paused] : pauses) {
    Connection* connection = self->peers_[rank].connection;
    if (connection != nullptr && connection->established && !connection->closing())
      (void)connection->set_reading_paused(paused);
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
  if (connection.closing()) return;  // out of memory: the connection failed
  if (!connection.in_ready_list) {
    connection.in_ready_list = true;
    ready_.push_back(&connection);
  }
}

TcpTransport::Impl::Choice TcpTransport::Impl::choose() noexcept {
  // Connections with nothing left leave the list (the others keep their order: round-robin).
  std::erase_if(ready_, [](Connection* connection) {
    if (!connection->closing() && connection->has_unissued()) return false;
    connection->in_ready_list = false;
    return true;
  });
  Choice best;
  const std::size_t n = ready_.size();
  if (n == 0) return best;
  if (ready_cursor_ >= n) ready_cursor_ = 0;
  std::size_t chosen = n;
  auto writable = [&](std::size_t i) -> Connection* {
    Connection* connection = ready_[(ready_cursor_ + i) % n];
    // With cut frames a control frame waits behind what libuv holds: at most one fragment.
    const std::size_t limit = connection->fragment_bytes() > 0
                                  ? std::min(kMaxBytesInFlight, connection->fragment_bytes())
                                  : kMaxBytesInFlight;
    return connection->bytes_unwritten() < limit ? connection : nullptr;
  };

  // Pass 1: the lanes backlogged now, on the connections that may write (the scheduler raises
  // the virtual time of newly backlogged ones).
  scheduler_.begin_choice();
  for (std::size_t i = 0; i < n; ++i)
    if (Connection* connection = writable(i))
      connection->for_each_backlogged_lane([&](std::size_t lane) { scheduler_.offer(lane); });
  scheduler_.settle();

  // Pass 2: the first control frame from the cursor wins outright; otherwise the least virtual
  // time, then the lower priority, then the first from the cursor.
  bool urgent = false;
  for (std::size_t i = 0; i < n && !urgent; ++i) {
    Connection* connection = writable(i);
    if (connection == nullptr) continue;
    connection->for_each_candidate(share_by_lane_, [&](const detail::WriteCandidate& candidate) {
      if (urgent) return;
      if (!candidate.urgent && chosen != n) {
        const double v = scheduler_.virtual_time(candidate.lane);
        const double best_v = scheduler_.virtual_time(best.candidate.lane);
        if (v > best_v || (v == best_v && candidate.priority >= best.candidate.priority)) return;
      }
      best = {connection, candidate};
      chosen = i;
      urgent = candidate.urgent;
    });
  }
  if (chosen != n) ready_cursor_ = (ready_cursor_ + chosen + 1) % n;
  return best;
}

void TcpTransport::Impl::pump() noexcept {
  // The send cap's bucket may bank the link time this thread misses while frames wait (see
  // RateLimiter): it is backlogged from here until the ready list empties.
  if (limiter_ && !ready_.empty()) limiter_->start_backlog(RateLimiter::steady_seconds());
  while (!stopping_) {
    const Choice choice = choose();
    // None: nothing queued, or every connection with frames has kMaxBytesInFlight in flight (its
    // write completion pumps again).
    if (choice.connection == nullptr) break;
    // Capped: a slice, so the bucket paces evenly. Uncapped: the rest of the frame in one write
    // (as many bytes a syscall as the socket takes; the in-flight limit still holds all but it).
    const std::size_t want =
        limiter_ ? std::min(choice.candidate.remaining, kSliceBytes) : choice.candidate.remaining;
    if (limiter_ && limiter_->available() < want) {
      if (uv_is_active(reinterpret_cast<uv_handle_t*>(&pace_timer_)) == 0) {
        // 1 ms to 1 s: a due time of 0 would run the timer again in the same loop pass, forever
        // (an absurdly small rate overflows the conversion); a longer wait is checked again.
        const double wait_ms = std::ceil(limiter_->seconds_until(want) * 1000.0);
        uv_timer_start(&pace_timer_, &Impl::on_pace,
                       static_cast<std::uint64_t>(std::clamp(wait_ms, 1.0, 1000.0)), 0);
      }
      return;
    }
    // A failed write may close the connection and edit ready_: choose() starts afresh each time.
    const std::size_t written = choice.connection->write_some(want, choice.candidate.lane);
    if (limiter_) limiter_->consume(written);
    if (!choice.candidate.urgent) scheduler_.charge(choice.candidate.lane, written);
    if (written == 0) break;  // cannot happen for a non-empty frame; never spin
  }
  if (limiter_ && ready_.empty()) limiter_->end_backlog();  // nothing waits: idle banks nothing
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

void TcpTransport::Impl::on_pace(uv_timer_t* timer) noexcept {
  static_cast<Impl*>(timer->data)->pump();
}

}  // namespace gradmesh::net

// The TCP transport's write scheduler (net/tcp/send_scheduler.h).
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
//    over kMaxBytesInFlight waits for a write completion (the transport's on_writable pumps
//    again), so libuv's FIFO, where priority no longer acts, holds at most that plus one frame.
//  - Frames are written a fragment at a time: with link rates given (set_link_rates()) a data frame
//    longer than an eighth of the peer timeout at its link's share goes cut (OutgoingFrame::
//    fragment), a control frame goes between two fragments, and the in-flight bound drops to one
//    fragment, so a heartbeat, a liveness answer or an Abort waits at most about a quarter of the
//    peer timeout behind data on a slow link instead of a whole multi-MB frame.
#include "net/tcp/send_scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace gradmesh::net::tcp {

using detail::Connection;

SendScheduler::SendScheduler(std::size_t lanes) : scheduler_(lanes) {}

void SendScheduler::open(uv_loop_t* loop, double max_send_rate) {
  uv_timer_init(loop, &pace_timer_);
  pace_timer_.data = this;
  opened_ = true;
  if (max_send_rate > 0.0)
    limiter_.emplace(max_send_rate, RateLimiter::default_capacity(max_send_rate),
                     &RateLimiter::steady_seconds,
                     RateLimiter::default_backlog_capacity(max_send_rate));
}

void SendScheduler::close() noexcept {
  closed_ = true;
  auto* handle = reinterpret_cast<uv_handle_t*>(&pace_timer_);
  if (opened_ && !uv_is_closing(handle)) uv_close(handle, nullptr);
  ready_.clear();
}

void SendScheduler::enqueue(Connection& connection, std::unique_ptr<OutgoingFrame> frame) noexcept {
  connection.enqueue(std::move(frame));
  if (connection.closing()) return;  // out of memory: the connection failed
  if (!connection.in_ready_list) {
    connection.in_ready_list = true;
    ready_.push_back(&connection);
  }
}

void SendScheduler::forget(Connection& connection) noexcept {
  if (connection.in_ready_list) {
    std::erase(ready_, &connection);
    connection.in_ready_list = false;
  }
}

void SendScheduler::set_weights(std::span<const double> weights) noexcept {
  scheduler_.set_weights(weights);
  share_by_lane_ = true;
}

void SendScheduler::start_backlog(double since) noexcept {
  if (limiter_ && !ready_.empty()) limiter_->start_backlog(since);
}

SendScheduler::Choice SendScheduler::choose() noexcept {
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

void SendScheduler::pump() noexcept {
  // The send cap's bucket may bank the link time this thread misses while frames wait (see
  // RateLimiter): it is backlogged from here until the ready list empties.
  if (limiter_ && !ready_.empty()) limiter_->start_backlog(RateLimiter::steady_seconds());
  while (!closed_) {
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
        uv_timer_start(&pace_timer_, &SendScheduler::on_pace,
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

void SendScheduler::on_pace(uv_timer_t* timer) noexcept {
  static_cast<SendScheduler*>(timer->data)->pump();
}

}  // namespace gradmesh::net::tcp

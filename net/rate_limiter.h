#pragma once
// A token bucket that paces a node's socket writes (TransportOptions::max_send_rate).

#include <cstddef>
#include <functional>

namespace gradmesh::net {

/// Token bucket: tokens are bytes, refilled at `rate` bytes/s; the bucket starts full. A writer
/// asks available(), writes at most that many bytes, and consume()s them; when short it waits
/// seconds_until(n).
///
/// The bucket holds at most `capacity` bytes while the writer has nothing waiting, and up to
/// `backlog_capacity` while it has bytes queued (start_backlog() to end_backlog()). This models a
/// real link, where the NIC drains the kernel's socket buffer at the line rate whether or not the
/// sending thread is running: a writer descheduled while its bytes wait (2 cores shared by 8
/// nodes: tens of ms) catches up on the link time it missed, up to backlog_capacity, instead of
/// losing it. An idle link banks nothing beyond `capacity`. Over any interval the bytes taken are
/// at most rate x seconds + backlog_capacity.
///
/// Thread safety: none; the transport uses one per node on its loop thread.
class RateLimiter final {
 public:
  /// Monotonic time in seconds (any epoch).
  using Clock = std::function<double()>;

  /// std::chrono::steady_clock in seconds.
  [[nodiscard]] static double steady_seconds() noexcept;

  /// The capacity the transport uses for `rate` bytes/s: max(64 KiB, rate x 10 ms), so a 64 KiB
  /// write slice always fits and a burst after idling never exceeds ~10 ms of traffic.
  [[nodiscard]] static std::size_t default_capacity(double rate) noexcept;
  /// The backlog capacity the transport uses: max(default_capacity(rate), rate x 100 ms), about
  /// what a kernel socket buffer of 1-4 MB keeps a 100 Mbit/s-1 Gbit/s NIC busy for.
  [[nodiscard]] static std::size_t default_backlog_capacity(double rate) noexcept;

  /// `rate` > 0 bytes/s, `capacity` > 0 bytes, `backlog_capacity` >= capacity (0: = capacity).
  /// Throws gradmesh::ConfigError otherwise.
  RateLimiter(double rate, std::size_t capacity, Clock clock = &RateLimiter::steady_seconds,
              std::size_t backlog_capacity = 0);

  /// Whole tokens (bytes) available now, after refilling; at most the current cap.
  [[nodiscard]] std::size_t available();

  /// Takes `bytes` tokens. Taking more than available() is allowed and puts the bucket in debt,
  /// which later refills pay back first.
  void consume(std::size_t bytes);

  /// Seconds until `bytes` tokens are available (0 if they are now). `bytes` above capacity()
  /// is treated as capacity().
  [[nodiscard]] double seconds_until(std::size_t bytes);

  /// The writer has had bytes waiting since `since` (clock seconds; clamped to [last refill,
  /// now]): from then on tokens refill up to backlog_capacity(). A no-op while backlogged.
  void start_backlog(double since);
  /// Nothing waits any more: tokens above capacity() are dropped, and refill up to capacity().
  void end_backlog();

  [[nodiscard]] double rate() const noexcept { return rate_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t backlog_capacity() const noexcept { return backlog_capacity_; }
  [[nodiscard]] bool backlogged() const noexcept { return backlogged_; }

 private:
  void refill();

  double rate_;
  std::size_t capacity_;
  std::size_t backlog_capacity_;
  bool backlogged_ = false;
  Clock clock_;
  double tokens_;  // may be negative (debt)
  double last_;    // clock_() at the last refill
};

}  // namespace gradmesh::net

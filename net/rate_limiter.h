#pragma once
// A token bucket that paces a node's socket writes (TransportOptions::max_send_rate).

#include <cstddef>
#include <functional>

namespace gradmesh::net {

/// Token bucket: tokens are bytes, refilled at `rate` bytes/s up to `capacity` bytes; the bucket
/// starts full. A writer asks available(), writes at most that many bytes, and consume()s them;
/// when short it waits seconds_until(n).
///
/// Thread safety: none; the transport uses one per node on its loop thread.
class RateLimiter final {
 public:
  /// Monotonic time in seconds (any epoch).
  using Clock = std::function<double()>;

  /// std::chrono::steady_clock in seconds.
  [[nodiscard]] static double steady_seconds() noexcept;

  /// The capacity the transport uses for `rate` bytes/s: max(64 KiB, rate x 10 ms), so a 64 KiB
  /// write slice always fits and a burst never exceeds ~10 ms of traffic.
  [[nodiscard]] static std::size_t default_capacity(double rate) noexcept;

  /// `rate` > 0 bytes/s, `capacity` > 0 bytes. Throws gradmesh::ConfigError otherwise.
  RateLimiter(double rate, std::size_t capacity, Clock clock = &RateLimiter::steady_seconds);

  /// Whole tokens (bytes) available now, after refilling; at most capacity().
  [[nodiscard]] std::size_t available();

  /// Takes `bytes` tokens. Taking more than available() is allowed and puts the bucket in debt,
  /// which later refills pay back first.
  void consume(std::size_t bytes);

  /// Seconds until `bytes` tokens are available (0 if they are now). `bytes` above capacity()
  /// is treated as capacity().
  [[nodiscard]] double seconds_until(std::size_t bytes);

  [[nodiscard]] double rate() const noexcept { return rate_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  void refill();

  double rate_;
  std::size_t capacity_;
  Clock clock_;
  double tokens_;  // may be negative (debt)
  double last_;    // clock_() at the last refill
};

}  // namespace gradmesh::net

#pragma once
// Internal to net/tcp/: at most one log line per period for one kind of event (a flood of
// rejected connections must not write the disk full: README "Security").

#include <cstdint>
#include <optional>

namespace gradmesh::net::tcp {

/// Admits one event of a kind per `period_ms` to the log and counts the others, so that the next
/// admitted line can say how many were left out. Every event is still counted elsewhere (the
/// transport's counters); this only bounds the lines. Not thread safe (the loop thread owns it).
class LogThrottle {
 public:
  explicit LogThrottle(std::uint64_t period_ms = 1000) : period_ms_(period_ms) {}

  /// An event at `now_ms` (a monotonic clock, e.g. uv_now): the number of events left out of the
  /// log since the last admitted one when this one is to be logged, else nullopt (left out).
  [[nodiscard]] std::optional<std::uint64_t> admit(std::uint64_t now_ms) noexcept {
    if (logged_ && now_ms < last_ms_ + period_ms_) {
      ++left_out_;
      return std::nullopt;
    }
    logged_ = true;
    last_ms_ = now_ms;
    const std::uint64_t left_out = left_out_;
    left_out_ = 0;
    return left_out;
  }

 private:
  std::uint64_t period_ms_;
  std::uint64_t last_ms_ = 0;
  std::uint64_t left_out_ = 0;
  bool logged_ = false;
};

}  // namespace gradmesh::net::tcp

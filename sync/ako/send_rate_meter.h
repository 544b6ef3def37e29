#pragma once
// The send rate an Ako node measures while it trains at its final p, for the summary
// (measured_send_rate, measured_gamma, link_round_bytes_<r>; docs/metrics.md).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace gradmesh::sync::ako {

/// Measures the steady rounds (at the final p, not the end-of-job flush): the window opens at the
/// first round (whose bytes it does not count: they went out before the window) and closes at the
/// last; its seconds leave out the pauses within it (the per-epoch evaluation, pause()). From that:
/// the wire bytes per second sent (the rate eq. 3 planned for), the gradients per second the node
/// produced (the rounds' clocks), and each link's payload bytes per round.
///
/// Memory: one double per rank and one pair of time points per pause (once per epoch). Thread
/// safety: any thread; an internal mutex.
class SendRateMeter {
 public:
  using Clock = std::chrono::steady_clock;

  /// For a job of `nodes` ranks.
  explicit SendRateMeter(std::size_t nodes);

  /// A steady round went out at `now`: its last gradient's clock `clock`, `wire_bytes` on the wire
  /// (payload and frame headers, every peer), and per rank the payload bytes it sent that peer
  /// (`link_payload`, `nodes` entries, 0 for this node and peers sent nothing).
  void round(Clock::time_point now, std::uint64_t clock, double wire_bytes,
             const std::vector<double>& link_payload);
  /// Training paused (true) or resumed (false) at `now`.
  void pause(bool paused, Clock::time_point now);

  struct Figures {
    double seconds = 0;                    ///< the window, less its pauses (0: fewer than 2 rounds)
    double send_rate = 0;                  ///< wire bytes/s (0 when seconds is 0)
    double gamma = 0;                      ///< gradients/s (0 when seconds is 0)
    std::vector<double> link_round_bytes;  ///< per rank, payload bytes per steady round
  };
  [[nodiscard]] Figures figures() const;

 private:
  mutable std::mutex mutex_;
  std::uint64_t rounds_ = 0;
  Clock::time_point first_{}, last_{};
  std::uint64_t first_clock_ = 0, last_clock_ = 0;
  double bytes_ = 0;                  // wire bytes of the rounds after the first
  std::vector<double> link_payload_;  // per rank, over every steady round
  std::vector<std::pair<Clock::time_point, Clock::time_point>> pauses_;  // (begin, end)
};

}  // namespace gradmesh::sync::ako

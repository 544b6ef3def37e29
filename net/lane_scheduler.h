#pragma once
// Sharing a node's send link among lanes by weight: start-time fair queuing over lanes
// (Goyal, Vin, Cheng, SIGCOMM'96), the policy of Poseidon's bandwidth manager (arXiv'15 sec.
// 4.3.3: send as fast as the link allows, allocating bandwidth by each message's contribution).
// Pure bookkeeping, no I/O: the TCP send queue (net/tcp/send_scheduler.cpp) asks it which lane goes
// next and tells it what was written.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradmesh::net {

/// Checks weights for Transport::set_lane_weights(): each finite and >= 0, at most `lanes`
/// entries (`lanes` = TransportOptions::lanes.size()). Throws gradmesh::ConfigError naming the
/// lane index and value, or both counts.
void check_lane_weights(std::span<const double> weights, std::size_t lanes);

/// Virtual times of start-time fair queuing, one per lane.
///
/// Each lane s has a weight w_s (default 1) and a virtual time v_s (bytes / weight, starting at
/// 0); writing n bytes of a lane-s frame advances v_s by n / w_s (charge()). The writer serves
/// the backlogged lane with the least virtual time, so while lanes stay backlogged their bytes
/// follow their weights; a lane alone is served at once, whatever its share (work-conserving).
/// A choice goes:
///   begin_choice(); offer(s) for every lane with a frame ready to write; settle();
///   pick the offered lane with the least virtual_time(); write; charge(s, bytes).
/// A lane offered now but not at the previous choice has just become backlogged: settle() raises
/// its virtual time to the least one among the lanes that stay backlogged (or, when none does,
/// to the start tag of the last bytes charged: SFQ's system virtual time), so an idle lane
/// banks no credit.
///
/// Cost: O(1) per offer and charge, O(newly backlogged lanes) per settle; no allocation after
/// construction. Thread safety: none (the transport's loop thread owns it).
class LaneScheduler final {
 public:
  /// `lanes` >= 1 lanes (the transport's data lanes plus "control"), all of weight 1.
  explicit LaneScheduler(std::size_t lanes);

  /// Weights by lane as Transport::set_lane_weights() takes them (checked with
  /// check_lane_weights() first): an entry of 0 or a missing one is weight 1. Virtual times are
  /// kept; later charges use the new weights.
  void set_weights(std::span<const double> weights) noexcept;

  /// Starts a choice: no lane is offered yet.
  void begin_choice() noexcept;
  /// Lane `lane` has a frame ready to write in this choice (repeats are ignored).
  void offer(std::size_t lane) noexcept;
  /// Raises the virtual time of every lane offered now but not at the previous choice (see the
  /// class comment). Call after the last offer(), before comparing virtual_time()s.
  void settle() noexcept;
  /// `bytes` of a lane-`lane` frame were written: v_stage += bytes / w_stage.
  void charge(std::size_t lane, std::size_t bytes) noexcept;

  /// v_stage in bytes / weight. Only differences between lanes mean anything: the scheduler
  /// shifts all of them down together now and then to keep them small.
  [[nodiscard]] double virtual_time(std::size_t lane) const noexcept { return virtual_[lane]; }
  [[nodiscard]] double weight(std::size_t lane) const noexcept { return weight_[lane]; }
  [[nodiscard]] std::size_t lanes() const noexcept { return weight_.size(); }

 private:
  std::vector<double> weight_;
  std::vector<double> virtual_;
  std::vector<std::uint64_t> offered_in_;  // the choice (epoch_) a lane was last offered in
  std::vector<std::size_t> newcomers_;     // offered now, not at the previous choice
  std::uint64_t epoch_ = 1;                // current choice; 0 = never offered
  double continuing_floor_ = 0;            // least v among lanes offered now and before
  bool have_continuing_ = false;
  double system_ = 0;  // start tag of the last charge
};

}  // namespace gradmesh::net

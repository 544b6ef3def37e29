#pragma once
// Sharing a node's send link among stages by weight: start-time fair queuing over stages
// (Goyal, Vin, Cheng, SIGCOMM'96), the policy of Poseidon's bandwidth manager (arXiv'15 sec.
// 4.3.3: send as fast as the link allows, allocating bandwidth by each message's contribution).
// Pure bookkeeping, no I/O: the TCP send queue (net/tcp/send_queue.cpp) asks it which stage goes
// next and tells it what was written.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradmesh::net {

/// Checks weights for Transport::set_stage_weights(): each finite and >= 0, at most `stages`
/// entries (`stages` = TransportOptions::stages.size()). Throws gradmesh::ConfigError naming the
/// stage index and value, or both counts.
void check_stage_weights(std::span<const double> weights, std::size_t stages);

/// Virtual times of start-time fair queuing, one per stage.
///
/// Each stage s has a weight w_s (default 1) and a virtual time v_s (bytes / weight, starting at
/// 0); writing n bytes of a stage-s frame advances v_s by n / w_s (charge()). The writer serves
/// the backlogged stage with the least virtual time, so while stages stay backlogged their bytes
/// follow their weights; a stage alone is served at once, whatever its share (work-conserving).
/// A choice goes:
///   begin_choice(); offer(s) for every stage with a frame ready to write; settle();
///   pick the offered stage with the least virtual_time(); write; charge(s, bytes).
/// A stage offered now but not at the previous choice has just become backlogged: settle() raises
/// its virtual time to the least one among the stages that stay backlogged (or, when none does,
/// to the start tag of the last bytes charged: SFQ's system virtual time), so an idle stage
/// banks no credit.
///
/// Cost: O(1) per offer and charge, O(newly backlogged stages) per settle; no allocation after
/// construction. Thread safety: none (the transport's loop thread owns it).
class StageScheduler final {
 public:
  /// `stages` >= 1 stages (the transport's data stages plus "control"), all of weight 1.
  explicit StageScheduler(std::size_t stages);

  /// Weights by stage as Transport::set_stage_weights() takes them (checked with
  /// check_stage_weights() first): an entry of 0 or a missing one is weight 1. Virtual times are
  /// kept; later charges use the new weights.
  void set_weights(std::span<const double> weights) noexcept;

  /// Starts a choice: no stage is offered yet.
  void begin_choice() noexcept;
  /// Stage `stage` has a frame ready to write in this choice (repeats are ignored).
  void offer(std::size_t stage) noexcept;
  /// Raises the virtual time of every stage offered now but not at the previous choice (see the
  /// class comment). Call after the last offer(), before comparing virtual_time()s.
  void settle() noexcept;
  /// `bytes` of a stage-`stage` frame were written: v_stage += bytes / w_stage.
  void charge(std::size_t stage, std::size_t bytes) noexcept;

  /// v_stage in bytes / weight. Only differences between stages mean anything: the scheduler
  /// shifts all of them down together now and then to keep them small.
  [[nodiscard]] double virtual_time(std::size_t stage) const noexcept { return virtual_[stage]; }
  [[nodiscard]] double weight(std::size_t stage) const noexcept { return weight_[stage]; }
  [[nodiscard]] std::size_t stages() const noexcept { return weight_.size(); }

 private:
  std::vector<double> weight_;
  std::vector<double> virtual_;
  std::vector<std::uint64_t> offered_in_;  // the choice (epoch_) a stage was last offered in
  std::vector<std::size_t> newcomers_;     // offered now, not at the previous choice
  std::uint64_t epoch_ = 1;                // current choice; 0 = never offered
  double continuing_floor_ = 0;            // least v among stages offered now and before
  bool have_continuing_ = false;
  double system_ = 0;  // start tag of the last charge
};

}  // namespace gradmesh::net

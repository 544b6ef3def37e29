#pragma once
// The network side of Ako's partial gradient exchange, for AkoStage: rounds of partitions, the
// warm-up's whole rounds and the switch of p (Ako SoCC'16 sec. 3.1, 4.2; Algorithm 1 lines 5-11).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/error.h"
#include "net/payload.h"
#include "sync/ako/accumulation_queue.h"
#include "sync/ako/handoff_ring.h"
#include "sync/ako/membership.h"
#include "sync/ako/messages.h"
#include "sync/ako/partition_agreement.h"
#include "sync/ako/payload_pool.h"
#include "sync/ako/range_partition.h"
#include "sync/ako/send_rate_meter.h"
#include "sync/lane_router.h"

namespace gradmesh::engine {
class Executor;
}

namespace gradmesh::sync::ako {

/// Sends this node's gradients to its peers. The compute side hands gradients off into the
/// HandoffRing and posts the sender (post()); the sender's pump, a job on the executor's network
/// arena, folds them into the accumulation queue (Algorithm 1 line 6) and sends each live peer,
/// per round, one range of the sum of its link's last p round gradients (line 9: the partition
/// g*_r; kPartition, key = p << kPartitionShift | k, round = the clock of the round's last
/// gradient). Phases: until the first plan is agreed, warm-up rounds send the whole accumulated
/// gradient (p = 1, kFullRound, one round in flight); then rounds at the first plan's per-link
/// counts (the probe of automatic p); then at the final plan's. A switch of p that changes any
/// link's count first sends each peer, whole, what it has not received of this node's gradients
/// (ako::undelivered), then starts a fresh ring. When every send buffer is in flight the network
/// is behind (sec. 4.2): every waiting gradient folds into the open round at once.
///
/// Every send goes through send_to(): a peer's failure goes to the failure handler, never out.
/// AkoStage sends its control messages (profiles, end markers, join requests) through it too.
///
/// Thread safety: post(), send_to(), broadcast(), the counters and stopped() from any thread;
/// the pump runs on the network arena (one at a time; post() coalesces). stop(), set_clock() and
/// the destructor take the sender's mutex, as the pump does.
class RoundSender {
 public:
  using Clock = std::chrono::steady_clock;
  using FailureHandler = std::function<void(const PeerError& error)>;

  /// The lanes the sender's rounds go on (routed by the owner).
  struct Lanes {
    LaneId partition = 0;   ///< kPartition rounds
    LaneId full_round = 0;  ///< warm-up rounds and the whole undelivered gradients (kFullRound)
  };

  /// Rank `rank` of `nodes` (>= 2), a model of `floats` floats. `rounds_in_flight`: rounds whose
  /// payloads may be queued in the transport at once (send buffers: that many per peer).
  /// `on_failure` hears of every peer that failed a send; `after_pump` runs after every pump (the
  /// end of job waits on it). The references must outlive the sender.
  RoundSender(std::size_t rank, std::size_t nodes, std::size_t floats, Lanes lanes,
              std::size_t rounds_in_flight, engine::Executor& executor, LaneRouter& router,
              const PartitionAgreement& agreement, const Membership& membership,
              HandoffRing& handoff, FailureHandler on_failure, std::function<void()> after_pump);
  /// Stops (no pump sends after it) and detaches from the buffers still in the transport.
  ~RoundSender();
  RoundSender(const RoundSender&) = delete;
  RoundSender& operator=(const RoundSender&) = delete;

  /// Posts the pump unless one is posted already, or the sender stopped.
  void post();

  /// From now on rounds are the end of the job's, not training's (no send-rate measurement).
  void begin_flush() noexcept { flushing_.store(true, std::memory_order_release); }

  /// No more sends after it returns. With `send_undelivered`, first sends each peer, whole, what
  /// it has not received of the gradients folded so far (not after warm-up rounds: those
  /// delivered whole). Idempotent.
  void stop(bool send_undelivered);
  [[nodiscard]] bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

  /// A rejoining node starts its rounds at the donor's clock: gradients folded and sent so far.
  void set_clock(std::uint64_t clock);

  /// Gradients contained in rounds sent (the next round's tag is the clock of its last gradient).
  [[nodiscard]] std::uint64_t sent_clock() const noexcept {
    return sent_clock_.load(std::memory_order_acquire);
  }
  /// Every round sent, full ones included; kFullRound rounds sent (warm-up, switch, end).
  [[nodiscard]] std::uint64_t rounds_sent() const noexcept { return rounds_sent_.load(); }
  [[nodiscard]] std::uint64_t full_rounds() const noexcept { return full_rounds_.load(); }

  /// Training paused (true) or resumed at `now`: left out of the measured send rate.
  void pause(bool paused, Clock::time_point now);
  /// The rounds at the final p during training (SendRateMeter).
  [[nodiscard]] SendRateMeter::Figures measured() const;

  /// Sends one message on `lane`; a PeerError (that peer failed) goes to the failure handler.
  void send_to(std::size_t peer, LaneId lane, Kind kind, std::uint64_t key, std::uint64_t round,
               net::Payload payload);
  /// send_to() every live peer; the payload is shared, not copied.
  void broadcast(LaneId lane, Kind kind, std::uint64_t key, std::uint64_t round,
                 const net::Payload& payload);

 private:
  /// What the rounds send: p = 1 warm-up rounds, rounds at the first plan, at the final p.
  enum class Phase { kWarmup, kProbe, kSteady };

  void pump();
  [[nodiscard]] bool dead(std::size_t peer) const noexcept { return membership_.dead(peer); }
  /// Opens `phase`: the warm-up's p = 1 ring, or a ring at plan `plan`'s per-link counts.
  void start_phase(Phase phase, std::size_t plan);
  /// Whether plan `plan`'s per-link counts equal the ring's (over the live peers).
  [[nodiscard]] bool same_links(std::size_t plan) const;
  void send_warmup_round(std::uint64_t round);
  void send_round(std::uint64_t round);
  void send_undelivered(std::uint64_t round);
  /// Whether `buffers` send buffers are free; if not, the next release posts the pump.
  [[nodiscard]] bool have_buffers(std::size_t buffers);

  const std::size_t rank_, nodes_, floats_;
  const Lanes lanes_;
  const std::size_t rounds_in_flight_;
  engine::Executor& executor_;
  LaneRouter& router_;
  const PartitionAgreement& agreement_;
  const Membership& membership_;
  HandoffRing& handoff_;
  const FailureHandler on_failure_;
  const std::function<void()> after_pump_;
  const double partition_frame_overhead_;  // wire bytes of a kPartition frame beyond its payload

  mutable std::mutex mutex_;  // the pump's state below
  Phase phase_ = Phase::kWarmup;
  // Per rank: the partitions rounds send that peer (its link's p; not in warm-up; none for this
  // node). The ring holds the largest of them.
  std::vector<std::optional<RangePartition>> links_;
  std::vector<double> round_payload_;         // per rank: this round's payload bytes
  std::unique_ptr<AccumulationQueue> queue_;  // p = 1 in warm-up
  std::unique_ptr<PayloadPool> pool_;
  std::uint64_t folded_ = 0;  // gradients folded into the queue: the next round's tag
  // Rounds at the final p during training (measured_send_rate), less the pauses.
  SendRateMeter meter_;

  std::atomic<bool> posted_{false};
  std::atomic<bool> waiting_for_buffers_{false};
  std::atomic<bool> flushing_{false};  // rounds of the end of the job: not counted as training
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint64_t> sent_clock_{0};
  std::atomic<std::uint64_t> rounds_sent_{0};
  std::atomic<std::uint64_t> full_rounds_{0};
};

}  // namespace gradmesh::sync::ako

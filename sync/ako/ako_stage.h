#pragma once
// Strategy `ako`: partial gradient exchange (Watcharapichat et al., "Ako: Decentralised Deep
// Learning with Partial Gradient Exchange", SoCC'16, sec. 3 and 4).

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/message.h"
#include "sync/ako/accumulation_queue.h"
#include "sync/ako/final_exchange.h"
#include "sync/ako/handoff_ring.h"
#include "sync/ako/join_exchange.h"
#include "sync/ako/membership.h"
#include "sync/ako/messages.h"
#include "sync/ako/partition_agreement.h"
#include "sync/ako/partition_count.h"
#include "sync/ako/payload_pool.h"
#include "sync/ako/range_partition.h"
#include "sync/ako/round_receiver.h"
#include "sync/ako/round_sender.h"
#include "sync/ako/send_rate_meter.h"
#include "sync/ako/staging_delta.h"
#include "sync/ako/staleness_clocks.h"
#include "sync/collective/ring_allreduce.h"
#include "sync/lane_router.h"
#include "sync/quorum.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// Ako's worker (sec. 4.2, Fig. 7): compute tasks never wait for the network; network tasks
/// accumulate, partition, send and receive.
///
/// Tasks added to each iteration's graph (all compute-arena, all cheap):
///  - ako_gate (root, precedes ako_apply): the staleness bound of sec. 3.3 / Algorithm 1 line 3,
///    a deferred task completed by the transport's loop thread when a peer's clock advances;
///  - ako_apply (precedes forward_0): folds the staging delta — the received partitions times
///    -lr, added by the loop thread under a mutex (line 13) — into the parameters. The loop thread
///    never writes the parameters itself, so there is no data race with forward/backward: received
///    partitions take effect at the start of the next iteration, not mid-pass. (The paper applies
///    them lock-free "at once" and accepts lost updates, sec. 4.2 step 5; we trade at most one
///    iteration of delay for race-free code.)
///  - ako_step_l (after backward_l): u_l = (g_l + wd w_l) / n. With optimizer.momentum = 0,
///    w_l -= lr u_l at once (line 5), plain SGD as Algorithm 1 lines 5 and 13, and u_l is what is
///    sent. The 1/n (not in the paper, whose lr is per node's gradient) makes every replica, once
///    it has every node's u, step lr along the mean gradient, as the BSP strategies do, so a job
///    keeps its optimizer settings when it switches strategy. With momentum mu > 0 (beyond the
///    paper, which has none), each node keeps the velocity of its own updates, v_l = mu v_l + u_l,
///    steps w_l -= lr v_l, and sends v_l in u_l's place: every replica then applies every node's
///    momentum update -lr v (lines 5 and 13 with v for g), and a node's momentum never acts on
///    its peers' stale gradients.
///  - ako_handoff (after backward_0 and every step): puts g_t into the HandoffRing (a memcpy into a
///    free slot; no allocation), ticks the local clock c_j (line 11) and posts the network side;
///    the run then ends.
///
/// Network side (jobs posted on the network arena, serialised): one round per handed-off slot —
/// fold it into the AccumulationQueue (line 6) and, while the transport has released enough of the
/// pooled send buffers (kRoundsInFlight rounds), send round t: peer i gets range (i + r) mod p of
/// g*_t (r: the queue's round index), copied into a pooled buffer, as
/// Message{ako::Kind::kPartition, key = p << 32 | range, round = t}. A network side scheduled late
/// finds several slots and sends their rounds back to back. When the buffers are all in flight (the
/// network is behind: sec. 4.2 "network tasks accumulate"), every waiting gradient folds into the
/// open round at once, which goes out when a buffer returns; letting them queue in the ring instead
/// added rounds of latency and made 8 bandwidth-bound nodes at p = 24 diverge. (A full ring,
/// compute 4 gradients ahead of a starved network thread, also folds into its newest slot.) `round`
/// carries c_j, the number of gradients sent so far, so peers' staleness clocks stay exact, and
/// every gradient is still sent exactly once per range and peer.
///
/// Partition count p (sec. 3.2, eq. 3): `sync.ako.partitions = N`, or auto: the nodes agree on
/// p = ceil(gamma x m x (n - 1) / B), clamped to [1, ako::max_auto_partitions(m)] (128, fewer
/// for models over 8 MB: the ring holds p copies of the model), from gamma, the gradient
/// rate, "profiled during system start-up" (sec. 3.2): each node measures its own (at least
/// kProfileIterations and kProfileSeconds, skipping the first), broadcasts it (ako::Kind::kProfile
/// on ako::kControlLane) and all take the mean over nodes — under the staleness bound every node
/// advances at a common pace, and the mean is the least noisy estimate of it from a short profile.
/// The same p results on every node.
///
/// Gamma must be the rate reached while the network runs at the planned load: sending and receiving
/// cost CPU (on 2 shared cores, 2 nodes compute 530 gradients/s with the network idle and 310/s
/// while exchanging 7 MB/s each), and eq. 3's prediction gamma m (n - 1) / p only holds for the
/// gamma reached under it. So auto p is planned twice, both times while training goes on:
///  1. warm-up: the node runs Ako with p = 1 — each round sends all of g*, the gradients folded
///     since the previous round, to every peer (ako::Kind::kFullRound on ako::kFullRoundLane)
///     — back to back, one in flight: a round goes out when the previous one has been written,
///     so with net.max_send_rate the warm-up loads the network at the cap B, about the load the
///     planned p will put on it. (With only a declared sync.ako.bandwidth nothing caps the
///     warm-up: its gamma is then lower than at p, and the probe below corrects it.)
///     The staleness bound's slack is the loosest auto p can end with, max p + tau, so the
///     whole-gradient rounds rarely hold compute back but no node drifts far ahead (unbounded, a
///     node that started faster ran 900 iterations ahead, then stalled for seconds). Its gamma
///     gives p1.
///     With p = 1 each round delivers its gradients whole, so the ring at p1 starts empty and the
///     gradients not yet sent open its first round.
///  2. probe: the node runs at p1 and measures gamma again, now with the per-round work of p1 and
///     the bound at p1 + tau, over at least kProbeSeconds and one epoch of iterations (at most
///     kProbeMaxSeconds); that gamma gives the final p. Its window opens 2 m (n - 1) / B
///     seconds after the node agreed on p1: by then its last warm-up round (m (n - 1) bytes at B)
///     and its peers' have been written, and the tighter bound has pulled the nodes within p1 + tau
///     of each other; a window over that transition measured gamma at a third of its steady value
///     (8 nodes). If the final p differs from p1, the node sends each peer, once, whole, what that
///     peer has not yet received of its gradients (ako::undelivered(), an ako::Kind::kFullRound),
///     and starts a fresh ring at p.
/// A partition message names its p, so a node may receive p1 and p rounds, in any mix, from peers
/// that switch before or after it. Every gradient still reaches every peer exactly once.
///
/// Links of different speeds (issue 14, beyond eq. 3's single B): with auto p, when the start-up
/// probe measured this node's links (SyncContext::measured) and their rates differ by more than
/// topo::kEqualLinksRatio, each link gets its own count p_i = ceil(p x mean rate / its rate)
/// (topo::link_partitions; p = eq. 3's unrounded value; an explicit p is every link's), so the
/// bytes each link
/// carries per round follow its rate and every link finishes a round in the same time; with equal
/// links every p_i is p, eq. 3. The ring holds max p_i rounds; peer i receives range
/// (i + r) mod p_i of the sum of the last p_i round gradients (g*_r when p_i is the ring's,
/// AccumulationQueue::window_sum() otherwise), so every gradient reaches every peer exactly once
/// on every link. Receivers need nothing new: each message names its p.
///
/// End of the job (finish()): the node sends the rounds of every gradient it produced (so the
/// peers' staleness clocks reach its last one), then ako::Kind::kDone, and waits (bounded) for
/// every peer's. Then, by sync.ako.final:
///  - average (default): the nodes replace their replicas by the replicas' mean, a ring
///    all-reduce of the parameters (lane ako::kAverageLane) divided by n, the same bits on every
///    node; staged partitions not yet applied are dropped (their gradients are in the replicas of
///    the nodes that made them). Measured in the README ("Ako's final model"): folding everything
///    in at once lands far from every replica at large p; the mean lands at or above their mean
///    accuracy. If a peer failed, the survivors average among themselves (above); if a peer did
///    not finish in time, the node folds in what it has received and keeps its replica, and
///    warns.
///  - fold: it first sends each peer what it has not received (one ako::Kind::kFullRound, instead
///    of p - 1 rounds without new gradients) and then folds all staged updates in: every replica
///    then holds every node's gradients (equal up to the order of float additions).
///
/// Measured send rate (summary "measured_send_rate"): wire bytes of the rounds at the final p, from
/// the second to the last one sent for a training gradient, over the time between the first and the
/// last less the node's pauses (its evaluations, pause()) — the quantity eq. 3 predicts (Ako's
/// Fig. 12b), free of start-up, warm-up, probe, evaluation and the final exchange. Pauses are
/// left out of the gamma profiles' windows too.
///
/// A peer that fails (its connection breaks, it aborts, or net.peer_timeout passes without a byte
/// from it) is dropped, as Ako SoCC'16 sec. 4.3 has it ("the remaining workers continue
/// training"): the survivors take it out of their staleness clocks (a gate waiting for it opens),
/// send it nothing more, agree on p among the live nodes if it died before its profile, scale
/// their updates by 1 / (live nodes) from then on, and at the end wait only for the live peers'
/// kDone. With sync.ako.final = average the survivors then average their replicas among
/// themselves (average_survivors(): each sends its replica whole, ako::Kind::kReplica, and takes
/// the mean in rank order of its own and those that arrive). Each failure is logged
/// with the peer's rank and address and counted (summary "peers_failed").
/// The survivors go on only while they are a quorum of the job's n ranks (sync::Quorum: more than
/// half, or net.min_nodes): Ako has no views, failures reach each node one by one in any order,
/// and a failed rank may come back (--rejoin), so the membership counted against is the fixed n,
/// not the last set of survivors (which would let both halves of a 2 + 2 split go on, each
/// seeing 4 -> 3 -> 2). A node below it is cut off (a partition's small side, a node woken from a
/// pause after the others dropped it): its gates fail with the error, it writes no checkpoint and
/// no metrics (check_quorum()) and exits non-zero, instead of finishing alone with a replica that
/// looks like the job's.
///
/// Errors: messages that break the protocol are dropped, counted and logged.
/// Thread safety: as SyncStage. Construction throws ConfigError for auto p without a bandwidth.
class AkoStage final : public SyncStage {
 public:
  /// Iterations over which gamma is profiled (each of the two profiles, auto p).
  static constexpr std::uint64_t kProfileIterations = 20;
  /// And for at least this long, seconds (smooths the scheduling noise of shared cores): the
  /// warm-up profile, then the probe, whose gamma is the one the final p is planned with.
  static constexpr double kProfileSeconds = 1.0;
  static constexpr double kProbeSeconds = 2.0;
  /// The probe also spans one epoch of iterations (SyncContext::iterations_per_epoch), so that
  /// every peer's per-epoch evaluation, which takes CPU from this node on shared cores, weighs in
  /// gamma as it does in the run (a 2 s probe at 8 nodes, shorter than their 2.9 s epoch, measured
  /// gamma 0.77-1.36 times the run's, depending on whether evaluations fell in it) — but it ends
  /// after this many seconds at most (large datasets, with long epochs, weigh evaluation less).
  static constexpr double kProbeMaxSeconds = 10.0;
  /// Rounds whose payloads may be queued in the transport at once.
  static constexpr std::size_t kRoundsInFlight = 4;
  /// Most gradients the compute side may hand off before the network side takes them (the
  /// HandoffRing's slots; fewer for large models: the ring is capped at kHandoffBytes).
  static constexpr std::size_t kHandoffSlots = 4;
  static constexpr std::size_t kHandoffBytes = std::size_t{64} << 20;

  explicit AkoStage(SyncContext context);
  ~AkoStage() override;
  AkoStage(const AkoStage&) = delete;
  AkoStage& operator=(const AkoStage&) = delete;

  [[nodiscard]] std::string_view name() const noexcept override { return "ako"; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  /// Sends every gradient handed off but not yet sent and, to each peer, whatever it has not
  /// received; then waits for every peer's last messages and folds them in. Waits at most
  /// network_wait_seconds(2 (n - 1) model bytes) in all: each peer may be owed up to a model's
  /// ranges, and owes as much. Returns true (the replica changed) when there are peers.
  bool finish() override;
  /// Keeps the pause out of an open gamma profile's window and out of measured_send_rate's.
  void pause(bool paused) override;
  /// "partitions" (the final p), "gamma" (gradients/s: the mean over nodes of the probe at p1 for
  /// auto p, this node's own first profile for an explicit p), "model_bytes", "bandwidth" (B,
  /// bytes/s; 0 for an explicit p without one), "nodes", "predicted_send_rate" (gamma m (n - 1) /
  /// p, bytes/s), "eq3" (the unrounded eq. 3 value), "warmup_gamma" and "warmup_partitions" (the
  /// first plan, auto p; else 0), "staleness" (tau), "gradients" (c_j), "rounds_sent" (every round,
  /// full ones included), "full_rounds" (ako::Kind::kFullRound sent: warm-up, switch, end),
  /// "partitions_received", "full_rounds_received", "staleness_waits", "profile_iterations",
  /// per peer r "link_partitions_<r>" (its link's p at the final plan) and "link_round_bytes_<r>"
  /// (payload bytes per round sent to it at the final plan during training; 0 without such rounds)
  /// (gradients before the final p was planned); and, over the rounds at the final p during
  /// training (class comment; 0 with fewer than 2 such rounds): "measured_send_rate" (wire
  /// bytes/s), "measured_gamma" (gradients/s those rounds carried), "measured_seconds" (the
  /// window).
  [[nodiscard]] std::map<std::string, double> summary() const override;
  /// Checkpoints (Ako SoCC'16 sec. 4.3: "the partial model and the staleness counters"; the
  /// accumulation queue is dropped): between two iterations the replica and this node's momentum
  /// are quiescent (only ako_apply and ako_step, compute tasks of the iteration, write them; the
  /// network side writes the staging delta), so the pipeline's sections ("model", "optimizer",
  /// "cursor") hold a consistent partial model. This stage saves nothing of its own: every node
  /// resumes from the same iteration (the newest common checkpoint), so the staleness clocks
  /// start again level, and p is profiled again (auto) or given. What is lost on a resume: the
  /// updates staged but not yet applied, the partitions in flight and the gradients not yet sent
  /// (in the replica of the node that made them, not in its peers'). The same node count only
  /// (the replicas differ: no re-split).
  [[nodiscard]] std::string checkpoint_refusal() const override { return {}; }
  /// Throws the cut-off error once fewer live nodes than the quorum remain (class comment).
  void check_quorum() const override;
  /// A restarted node (SyncContext::rejoin), once its transport has taken its rank back, sends
  /// every peer a join request (ako::Kind::kJoinRequest): each sends it rounds again and re-admits
  /// it to its staleness clocks at its first round; the lowest other rank, the donor, also answers
  /// at its next iteration boundary, once its plan is agreed, with its replica, clock, p and B
  /// (ako::Kind::kJoinState). This node then starts from that replica (fresh momentum), at that
  /// clock and p, without profiling; the donor's B (the job's slowest link) stands in for the
  /// link probe it skipped: its waits and, without planner.bandwidth, every link's rate
  /// (LaneRouter::set_link_rates, so its data frames are cut as its peers' are). Ako SoCC'16
  /// sec. 4.3: a restarted worker takes the current model from its peers. The gradients in flight
  /// when it died, and those its donor had not yet applied, are not replayed to it: the exchange's
  /// exactly-once holds again from its return. Returns the donor's clock (its iterations done).
  /// Waits at most network_wait_seconds(model bytes, kJoinTimeoutSeconds). Throws PeerError if the
  /// donor fails first, gradmesh::Error if it does not answer in time.
  std::uint64_t join() override;
  static constexpr double kJoinTimeoutSeconds = 120.0;
  /// The fixed part of every bounded wait on the network at the end of the job and at a rejoin
  /// (the donor's replica comes at its next iteration boundary): seconds for the peers to get
  /// there, whatever the link.
  static constexpr double kNetworkWaitSeconds = 60.0;
  /// Seconds a wait that moves `bytes` over this node's slowest link may take: the fixed part
  /// (kNetworkWaitSeconds, or kJoinTimeoutSeconds for a join) plus bytes / B, B the measured or
  /// configured bandwidth (eq. 3's); the fixed part alone when B is unknown. So a 1 Mbit/s link
  /// (a 20M-parameter model's ranges take 640 s per peer there) is waited for, not cut off.
  [[nodiscard]] double network_wait_seconds(double bytes,
                                            double fixed = kNetworkWaitSeconds) const noexcept;
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return router_.rejected();
  }
  /// The final p once agreed (at once for an explicit p), else nullopt.
  [[nodiscard]] std::optional<std::size_t> partitions() const;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kPlans = ako::PartitionAgreement::kPlans;  // p1, final p

  // compute tasks
  void gate(engine::TaskContext& task);
  void apply_staging();
  void step_layer(std::size_t layer);
  void handoff();
  void end_profile(std::size_t plan, double gamma);
  [[nodiscard]] double profile_gamma() const;  // gradients/s in the open profile window, or 0

  // network side: the sender (ako::RoundSender); none on one node
  void post_pump() {
    if (sender_) sender_->post();
  }
  void broadcast_profile(std::size_t plan, double gamma);

  // loop thread (and the network side for this node's own profile)
  void on_message(std::size_t from, net::Message&& message);
  /// Drops the failed peer (class comment); idempotent per peer. Any thread.
  void on_failure(const PeerError& error);
  /// The live nodes fell below the quorum after `error`: stores the cut-off error (first wins),
  /// logs it and fails the gates, so the node stops. Any thread.
  void cut_off(const PeerError& error);
  /// The transport took a failed peer back (it restarted): logged only; take_back() follows
  /// its join request, once its lanes are routed (rounds sent before would be rejected there).
  void on_rejoin(std::size_t peer);
  /// Re-admits a rejoining peer to the sends, and to the clocks at its first round.
  void take_back(std::size_t peer);
  /// At an iteration boundary (ako_apply): answers pending kJoinRequests with this replica.
  void donate_replica();
  void record_join_state(std::size_t from, net::Message&& message);
  /// Agrees on plan `plan`'s p once every live node's gamma is in (record_profile, on_failure).
  void try_agree(std::size_t plan);
  /// sync.ako.final = average: the parameters become the mean of the n replicas (finish()).
  void average_replicas();
  /// After a peer failed (sync.ako.final = average): every survivor sends its replica to the
  /// others and replaces its own by the mean, summed in rank order, of its own and every one
  /// that arrives from a live peer (bounded wait). Returns how many replicas were averaged.
  std::size_t average_survivors();
  void record_profile(std::size_t from, std::size_t plan, std::span<const double> values);
  /// Sets plan `plan`: p, and each link's count from p_exact (eq. 3 unrounded, or the explicit p)
  /// and the measured link rates (topo::link_partitions).
  void agree(std::size_t plan, std::size_t partitions, double p_exact);
  void record_local_gamma(double gamma);
  void reject(std::size_t from, const std::string& why);

  SyncContext ctx_;
  const AkoOptions options_;  // [sync.ako] and the send cap (ako_options())
  // Set at the end of the constructor: the lanes are routed before the members their handlers
  // use exist, and a peer may send at once (a rejoining node's peers do); until then messages are
  // rejected, not handled.
  std::atomic<bool> constructed_{false};
  std::size_t floats_;  // m, floats
  bool auto_partitions_;
  double bandwidth_ = 0;  // B for eq. 3, bytes/s; 0 when unknown
  // The job's slowest link as this node knows it (planner.bandwidth, else the probe's, else
  // bandwidth_), bytes/s: what it gives a peer that rejoins from its replica (join()).
  double link_bandwidth_ = 0;

  ako::StalenessClocks clocks_;
  LaneRouter& router_;
  LaneId partition_lane_, control_lane_, full_round_lane_;
  // The end-of-job mean of the replicas (sync.ako.final = average, with peers).
  std::optional<collective::RingAllReduce> average_;

  // The agreement on p (plan 0: p1 or the explicit p; plan 1: the final auto p) and each link's
  // count; made in the constructor.
  std::optional<ako::PartitionAgreement> agreement_;
  [[nodiscard]] std::size_t plans_needed() const noexcept { return agreement_->plans_needed(); }
  [[nodiscard]] bool live(std::size_t r) const noexcept { return !dead(r); }

  // Compute side (gate / handoff tasks; finish() after the last run).
  std::atomic<std::uint64_t> local_clock_{0};  // c_j
  std::size_t profiles_sent_ = 0;              // plans this node has sent its gamma for
  std::atomic<std::uint64_t> profiled_{0};     // gradients before the final profile
  Clock::time_point profile_start_{};          // the current profile's window: from this handoff
  std::uint64_t profile_start_clock_ = 0;
  bool profile_started_ = false;
  std::optional<Clock::time_point> agreed_at_;  // first handoff after this node agreed on p1
  std::optional<Clock::time_point> paused_at_;  // the last pause(true)
  double settle_seconds_ = 0;  // the probe starts this long after agreeing on p1 (class comment)
  Clock::time_point last_handoff_{};
  std::optional<ako::HandoffRing> handoff_;  // with peers only

  std::atomic<bool> failed_{false};  // a peer failed
  // The peers dropped (sec. 4.3; on_failure(), back by take_back()) and the quorum: once the
  // live nodes fall below it this node is cut off; the error fails every gate and
  // check_quorum() throws it.
  ako::Membership membership_;
  // Rejoining (join()): the peers that asked this node for its replica, the answer this node got.
  ako::JoinExchange joins_;
  bool rejoined_ = false;  // this node joined from a donor's replica
  [[nodiscard]] bool dead(std::size_t peer) const noexcept { return membership_.dead(peer); }

  // Staging delta: -lr x received partitions, folded into the parameters by ako_apply.
  ako::StagingDelta staging_;

  // Checks and applies the peers' rounds into staging_ and clocks_.
  ako::RoundReceiver receiver_;
  // The end-of-job markers and the survivors' replicas (finish()); the sender's notify.
  ako::FinalExchange end_;

  // The network side: rounds out of the handed-off gradients, and every message this stage sends
  // (made last, with peers only: destroyed first, it stops before what it uses goes).
  std::optional<ako::RoundSender> sender_;
};

}  // namespace gradmesh::sync

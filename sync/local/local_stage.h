#pragma once
// Strategy local: local SGD with an outer optimizer (DiLoCo, Douillard et al., arXiv 2311.08105,
// Algorithm 1; issue 57). Each node steps its own replica with the job's optimizer (the inner
// optimizer) for H iterations, sending nothing; then the nodes all-reduce the change since the
// round began, Delta = theta_round_start - theta (the pseudo-gradient), and every node applies
// the mean Delta to theta_round_start with the outer optimizer (outer_optimizer.h), so the
// replicas are the same bits again. For links too slow for per-iteration exchange: the bytes of
// one all-reduce of the model every H iterations.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sync/collective/ring_allreduce.h"
#include "sync/compress/options.h"
#include "sync/local/options.h"
#include "sync/local/outer_exchange.h"
#include "sync/local/outer_optimizer.h"
#include "sync/local/quorum_rounds.h"
#include "sync/local/schedule.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// The stage. One iteration: each layer steps locally after its backward (as strategy none's
/// layers), then local_round counts the round's inner steps and, at the H-th, starts the outer
/// exchange of Delta (lane local_outer: a ring all-reduce, or the compressed forms of
/// outer_exchange.h under [sync.compression]); local_wait ends when the mean is in; local_outer
/// steps theta_round_start by the mean Delta and copies it into the replica. Every node holds the
/// same parameters after each round's last iteration (F = 1); between, each holds its own.
///
/// With H = 1 and outer "average" training equals BSP SGD on the union of the nodes' batches
/// (with the inner optimizer SGD, momentum included: the velocities are linear in the gradients;
/// up to float rounding). finish(): a job that ends mid-round averages the replicas (plain mean;
/// with [sync.compression] configured, no overlap, one fragment and no layer states, as
/// theta_round_start less the mean Delta sent as a round's, compressed, instead of the float ring),
/// and layer states (batch normalization's running statistics, each node's own while training)
/// are averaged, so the final model is one model on every node.
///
/// Overlap (sync.local.overlap = "eager" or "delayed"; Kale et al., "Eager Updates for
/// Overlapped Communication and Computation in DiLoCo", arXiv 2502.12996; Streaming DiLoCo's
/// overlap, arXiv 2501.18512, with a delay of a whole round): round r's exchange of Delta_r runs
/// during round r + 1's inner steps, and what it brings is applied at round r + 1's end. With n
/// nodes and theta_s(r) a node's replica when round r starts, at round r's end the node takes its
/// own Delta_r = theta_s(r) - theta, starts its exchange, waits for mean Delta_{r-1} (sent a round
/// earlier) and goes on from:
///   - "delayed" (the paper's delayed outer gradients): theta_s(r + 1) = g_{r-1} =
///     outer(g_{r-2}, mean Delta_{r-1}), the same bits on every node (g_0 the initial model; the
///     first round's end applies nothing). Every Delta is one round stale; this round's own work
///     reaches the replica one round later.
///   - "eager" (the paper's eager update): theta_s(r + 1) = outer_m(theta_s(r), Delta~) with
///     Delta~ = Delta_r / n + (mean Delta_{r-1} - own Delta_{r-1} / n): this node's own change at
///     once, the others' one round late, each applied once; the others' part is 0 after the
///     first round; one node: Delta~ = Delta_r, DiLoCo itself, bit for bit. Each node steps its
///     own outer optimizer (velocity) on its own estimates, so replicas differ to the end.
/// So each inner step of round r + 1 sees the outer steps of every change up to round r - 1,
/// plus (eager) this node's own change of round r through its outer step, plus its own steps so
/// far in round r + 1. finish() waits for the last exchange but does not apply it (an outer step
/// with no inner steps after it left the final model worse than the replicas: 73% against 84%
/// with eager and Nesterov, docs/measured.md) and averages the replicas where they differ (eager
/// always, delayed mid-round). H = 1 is then not BSP.
///
/// Fragments (sync.local.fragments = F > 1; Streaming DiLoCo, Douillard et al., arXiv 2501.18512,
/// sec. 2.2): the parameters are cut into F contiguous ranges of equal size (floats p m / F to
/// (p + 1) m / F, rounded down; the paper's fragments are blocks of layers: equal ranges give each
/// exchange the same bytes on any model), and fragment p is exchanged at inner step
/// s_p = (p + 1) H / F of each round (rounded down; fragment F - 1 at the round's end), with its
/// own outer optimizer, theta_round_start and exchange: the link carries F exchanges of m / F
/// floats spread over the round instead of one of m at its end. Without overlap each fragment
/// waits for its exchange at s_p (DiLoCo's step on that fragment). With overlap "delayed" the
/// exchange of fragment q runs until the next fragment's point, about H / F inner steps (the
/// paper's tau; F = 1: a round, as above): there the outer step on its mean gives the new global
/// fragment g', and the node's fragment and its round-start copy are both moved by g' - g, so
/// the inner steps taken since its exchange began are kept and go into its next Delta (every
/// inner step's change is exchanged once; the paper mixes the two models instead). Eager updates
/// are not defined per fragment here (ConfigError). With F > 1 the replicas never all agree at
/// once (each fragment agrees right after its own exchange), so finish() always averages them.
///
/// Checkpoints: theta_round_start, the outer velocity, the outer exchange's error-feedback
/// residual (its gathered form) and the round's inner steps done (with overlap also
/// the replica at the round's start, the exchange in flight, waited for and saved as its mean,
/// and for eager the node's own last Delta), so a
/// job stopped mid-round resumes bit for bit on the same node count (each node's replica and
/// inner optimizer are the model's and the optimizer's sections); per fragment where F > 1, and
/// only with the F it was written with. On another node count (a re-split, StrategyTraits::
/// resplit_by_replica) each node resumes one old node's replica, inner optimizer and outer state
/// (a new rank a copy of rank 0's, its residuals zero): the mean Delta of the round under way is
/// then over the replicas that go on. So a failed peer is survived as under the BSP strategies
/// (docs/failures.md): with checkpoint.dir the survivors roll back to the newest checkpoint and
/// go on without it (old ranks 0 to n - 2 keep their replicas; the work since that checkpoint is
/// lost, as under BSP), and a restarted node with --rejoin
/// comes back at a checkpoint boundary with a copy of rank 0's replica.
///
/// Quorum rounds (sync.local.quorum = k, on 2 or more nodes; local/quorum_rounds.h, Decoupled
/// DiLoCo, arXiv 2604.21428): instead of the ring, each node's Delta goes to rank 0 at its
/// round's end, rank 0 merges once Deltas from k nodes wait (stale ones weighed down) and sends
/// the new global model, and a node goes on from the newest version newer than its round's
/// start; a slow or failed node (other than rank 0) holds no one back, and once k nodes have
/// ended the others end too (ended()). finish(): rank 0's final merge of every change not yet
/// merged, the layer states averaged. No checkpoints (checkpoint_refusal()).
///
/// Thread safety: as SyncStage. Errors: the constructor throws ConfigError for a model on a
/// device (the outer step runs on host memory), for an H the options give out of range, for
/// more fragments than H or parameters, for fragments with overlap "eager", and for a quorum
/// above the node count or with fragments, overlap or compression.
class LocalStage final : public SyncStage {
 public:
  explicit LocalStage(SyncContext ctx);

  [[nodiscard]] std::string_view name() const noexcept override { return "local"; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  /// Per layer with parameters: "local H=<H>, <outer>[, <wire>][, overlap <kind>][, F
  /// fragments]", and its share of one round's exchange bytes over H iterations.
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  bool finish() override;
  /// local_steps (H), local_auto (1 when chosen), local_overlap (sync.local.overlap's index),
  /// local_fragments (F), predicted iteration and exchange seconds (a round's: the F fragments'),
  /// predicted utilization, predicted bytes per iteration.
  [[nodiscard]] std::map<std::string, double> summary() const override;
  void save_state(engine::StateWriter& out) override;
  /// With sync.local.steps = "auto", a checkpoint's H other than the one this job's start-up
  /// chose (another probe, another node count) is taken over (logged), so the round under way
  /// ends where it would have; a fixed H must match. Throws CheckpointError.
  void load_state(engine::StateReader& in) override;
  /// The next load_state() reads one old node's state (a re-split); when `copied` (this rank is
  /// new to the job and takes another's replica), its error-feedback residuals start at zero, so
  /// no node's compression error is sent twice.
  void prepare_resplit(std::size_t old_nodes, bool copied) override;
  /// With quorum rounds: why they cannot be checkpointed (each node holds its own version of the
  /// global model between merges); else "".
  [[nodiscard]] std::string checkpoint_refusal() const override;
  /// With quorum rounds, a restarted node (--rejoin) starts from rank 0's newest global model at
  /// rank 0's iteration (returned), waiting at most kJoinTimeoutSeconds; without them the
  /// default (a rejoin comes back through checkpoints). Throws as QuorumRounds::join.
  std::uint64_t join() override;
  /// With quorum rounds: throws the cut-off error when too few nodes are left (sync/quorum.h).
  void check_quorum() const override {
    if (quorum_) quorum_->check();
  }
  /// With quorum rounds: once a quorum of nodes has ended, the others end too (a straggler does
  /// not hold the job's end back).
  [[nodiscard]] bool ended() const override { return quorum_ && quorum_->ended(); }
  /// Messages the node's router rejected (a malformed outer encoding, a stray bucket or kind).
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return ctx_.router.rejected();
  }

  [[nodiscard]] const LocalSchedule& schedule() const noexcept { return schedule_; }
  /// Fragment `p`'s error-feedback residual (its floats; empty for a ring, or on one node).
  [[nodiscard]] std::span<const float> residual(std::size_t p) const {
    const Fragment& f = fragments_.at(p);
    return f.exchange ? f.exchange->residual_floats() : std::span<const float>{};
  }

 private:
  /// One fragment's range, schedule and outer state (the whole model when F = 1).
  struct Fragment {
    Fragment(std::size_t b, std::size_t e, std::size_t at, const LocalOptions& options)
        : begin(b),
          end(e),
          sync_step(at),
          outer(options.outer, options.outer_lr, options.outer_momentum, e - b) {}
    std::size_t begin, end;  // floats [begin, end) of the parameters
    std::size_t sync_step;   // the round's inner step (1 .. H) at which its exchange starts
    OuterOptimizer outer;
    std::optional<local::OuterExchange> exchange;  // none on one node
    std::uint64_t exchanges = 0;                   // exchanges it started (its rounds)
    // Overlap: an exchange started and not yet applied; its mean already in delta_.
    bool pending = false;
    bool mean_ready = false;
  };

  void on_message(std::size_t from, net::Message&& message);
  /// Without overlap, at fragment f's point: Delta = theta_round_start - theta, its exchange
  /// started.
  void start_exchange(Fragment& f);
  /// Without overlap: the outer step on f's mean Delta; theta = theta_round_start on f.
  void apply_outer(Fragment& f);
  /// With overlap, at fragment f's point: the pending outer step of the fragment before it
  /// applied (its mean taken when not mean_ready), f's Delta started, f's replica reset.
  void end_overlapped(std::size_t f);
  /// With overlap: waits (on the executor) for every exchange in flight and takes their means
  /// into delta_ (mean_ready). Throws PeerError.
  void drain();
  /// finish() of a job that ended mid-round with a compressed outer exchange, no overlap, one
  /// fragment and no layer states: theta = theta_round_start - mean Delta, Delta exchanged as a
  /// round's. Throws PeerError.
  void finish_compressed();
  [[nodiscard]] bool overlapped() const noexcept { return options_.overlap != OverlapKind::kOff; }
  /// A checkpoint's H for this job's (sync.local.steps = auto): the schedule and the fragments'
  /// points follow it.
  void adopt_steps(std::size_t steps);
  /// The fragment exchanged before f in the round's order (f - 1, wrapping: F - 1 before 0).
  [[nodiscard]] std::size_t previous(std::size_t f) const noexcept {
    return (f + fragments_.size() - 1) % fragments_.size();
  }

  SyncContext ctx_;
  LocalOptions options_;
  LocalSchedule schedule_;
  std::size_t floats_;
  std::vector<float> start_;  // theta_round_start (per fragment: its global model)
  std::vector<float> delta_;  // the exchanges' inputs, then their means
  // Overlap only: the replica when the fragment's current round began.
  std::vector<float> round_start_;
  std::vector<float> own_;       // eager: this node's Delta of the round before
  std::vector<float> estimate_;  // eager: the tentative step's Delta~; delayed: scratch
  std::deque<Fragment> fragments_;
  std::size_t in_round_ = 0;      // inner steps done in the current round
  std::size_t due_ = kNone;       // the fragment whose point this iteration is
  bool resplit_copy_ = false;     // the next load_state() reads another node's state
  std::uint64_t iterations_ = 0;  // quorum rounds: iterations run (a rejoining node's rank 0's)
  /// How long a rejoining node waits for rank 0's global model, seconds.
  static constexpr double kJoinTimeoutSeconds = 120;
  static constexpr std::size_t kNone = ~std::size_t{0};
  LaneId lane_ = 0;
  CompressionOptions compression_;
  std::optional<collective::RingAllReduce> final_;  // bucket 1: the final average
  std::optional<local::QuorumRounds> quorum_;       // sync.local.quorum set, on 2 or more nodes
};

}  // namespace gradmesh::sync

#pragma once
// Quorum rounds of strategy local (issue 57, item 5; Decoupled DiLoCo, arXiv 2604.21428): the
// outer exchange without a barrier over every node, so a slow or failed node holds no one back.
// One node, the leader (rank 0, Decoupled DiLoCo's syncer), keeps the global model theta_g and
// the outer optimizer. At the end of each of its rounds a node sends its Delta (theta_g of the
// version its round started from, minus its replica) to the leader. As soon as Deltas from
// `quorum` distinct nodes wait (at most the live nodes still training), the leader merges every
// Delta that waits: theta_g <- outer(theta_g, sum of Delta / (1 + staleness) over the n live
// nodes), a new version (a fresh change counts 1 / n whenever it arrives, with every node's
// fresh Delta in a merge their mean; a stale one less: Zhang et al., "Staleness-aware Async-SGD
// for Distributed Deep Learning", IJCAI'16). A node's Delta is answered with the newest version
// once one is newer than the one its round started from: one model a round a node, whatever the
// number of merges. A node whose round ends
// goes on from the newest version once it is newer than the one its round started from (it waits
// only when no merge happened since); a Delta that missed a merge joins the next one, its staleness
// (versions made since its round started) counted.
//
// With quorum = n (and no failure) every merge takes one Delta from each node and every node
// waits for it: DiLoCo's synchronous rounds, the mean summed in rank order instead of round a
// ring. Failures: a failed peer other than the leader is dropped (its Deltas that arrived are
// merged, later ones never come) and the others go on under the majority rule (sync/quorum.h); a
// failed leader fails the job, naming it.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "engine/task.h"
#include "net/payload.h"
#include "sync/ako/membership.h"
#include "sync/lane_router.h"
#include "sync/local/outer_optimizer.h"

namespace gradmesh::sync::local {

/// Message kinds of quorum rounds on lane local_outer (above every gathered kind, kGatheredKind +
/// kMaxLocalFragments): a node's Delta to the leader (round = the version its round started
/// from), the leader's global model (round = its version), a node's last Delta and layer states
/// at the job's end, and the final model and states.
inline constexpr std::uint16_t kQuorumDeltaKind = 2000;
inline constexpr std::uint16_t kQuorumModelKind = 2001;
inline constexpr std::uint16_t kQuorumFinalKind = 2002;
inline constexpr std::uint16_t kQuorumFinalModelKind = 2003;
/// The leader to the nodes still training once a quorum of nodes has ended: end too.
inline constexpr std::uint16_t kQuorumEndKind = 2004;
/// A restarted node (--rejoin) to the leader: send me the newest version; and the answer (the
/// model, round = its version, key = the leader's iterations done).
inline constexpr std::uint16_t kQuorumJoinKind = 2005;
inline constexpr std::uint16_t kQuorumJoinStateKind = 2006;
/// A node to the leader: the final model is in (the leader's end waits for every live node's, so
/// its transport does not close under a final model still on a slow link).
inline constexpr std::uint16_t kQuorumFinalAckKind = 2007;
/// The rank that merges (Decoupled DiLoCo's syncer).
inline constexpr std::size_t kQuorumLeader = 0;

/// What the leader's merges saw (zeros on the other nodes).
struct QuorumFigures {
  std::uint64_t merges = 0;          ///< versions made (the final merge not counted)
  std::uint64_t contributions = 0;   ///< Deltas merged in them
  std::uint64_t partial_merges = 0;  ///< merges without a Delta from every node still training
  std::uint64_t stale = 0;           ///< Deltas whose round started before the newest version
  std::uint64_t max_staleness = 0;   ///< versions made between a Delta's start and its merge
  std::uint64_t staleness_sum = 0;   ///< the sum of those, over every Delta merged
  std::uint64_t final_deltas = 0;    ///< Deltas still waiting at the end, merged in the final
};

/// One node's side of quorum rounds for a model of `floats` parameters and `states` layer-state
/// floats.
///
/// The leader merges on a thread of its own (started by the constructor, joined by finish() or
/// the destructor), as soon as a merge is due, whatever its own training is doing: so the others
/// never wait for the leader's iterations, its evaluation or its end.
///
/// Memory: the leader keeps the Deltas that wait (each a received payload, not copied; at most
/// about one a node while the nodes keep pace) and theta_g (floats floats); every node keeps the
/// newest global model (one payload). One payload of floats() floats is allocated a round (this
/// node's Delta) and one a merge (the model sent).
///
/// Thread safety: contribute(), adopt() and finish() from the stage's compute tasks or the
/// node's thread (one at a time); await() from a task; on_message() and on_failure() from the
/// delivery thread. Internally locked.
class QuorumRounds {
 public:
  /// Node `rank` of `nodes` (>= 2); `quorum` in [1, nodes]; `min_nodes`: net.min_nodes (the
  /// majority rule otherwise); `initial`: the model every node starts from (version 0);
  /// `outer`: the outer optimizer (stepped on the leader only). Throws ContractError for values
  /// out of range.
  QuorumRounds(LaneRouter& router, LaneId lane, std::size_t rank, std::size_t nodes,
               std::size_t quorum, std::optional<std::size_t> min_nodes,
               std::span<const float> initial, std::size_t states, OuterOptimizer& outer);
  /// Stops and joins the leader's merge thread.
  ~QuorumRounds();
  QuorumRounds(const QuorumRounds&) = delete;
  QuorumRounds& operator=(const QuorumRounds&) = delete;

  /// At the end of this node's round: its Delta (floats() floats, relative to the version
  /// adopted last) to the leader (the leader keeps its own). Throws the error that failed this
  /// node (its leader gone, cut off).
  void contribute(std::span<const float> delta);
  /// Completes `done` once this node may go on: a version newer than the one adopted last exists.
  /// Fails it with the leader's PeerError or the cut-off error.
  void await(engine::Completion done);
  /// Copies the newest version into `theta` (floats() floats) and makes it the one this node's
  /// next Delta is relative to.
  void adopt(std::span<float> theta);
  /// The job's end: sends this node's last Delta (relative to the version adopted last) and its
  /// layer states (`states`, states floats) to the leader, which keeps merging for the nodes
  /// still training until every live node has sent its last, then sets the final model to
  /// theta_g minus the sum over the live nodes of their changes not yet merged (Deltas that waited
  /// and last Deltas: the replicas' mean when they all started from theta_g), and the layer
  /// states to their mean (rank order). Writes them into `theta` and `states`. Blocks until the
  /// final model is in. Throws the leader's PeerError, or the cut-off error.
  void finish(std::span<const float> delta, std::span<float> theta, std::span<float> states);

  /// A restarted node (gradmesh-node --rejoin), before its first iteration: asks the leader for
  /// its newest version, writes it into `theta` (floats() floats) and returns the leader's
  /// iterations done (the data cursor to go on from). Blocks at most `timeout_s` seconds.
  /// Throws Error when no answer comes, the leader's PeerError when it fails.
  [[nodiscard]] std::uint64_t join(std::span<float> theta, double timeout_s);
  /// A peer that failed restarted and took its rank back (the transport's rejoin): counted live
  /// again; the leader merges its Deltas again and answers its join request.
  void on_rejoin(std::size_t peer);
  /// This node's iterations done so far (the leader's: what a rejoining node goes on from).
  void note_iteration(std::uint64_t done) noexcept {
    iterations_.store(done, std::memory_order_relaxed);
  }

  /// Whether `message` is one of quorum rounds' kinds.
  [[nodiscard]] static bool owns(const net::Message& message) noexcept;
  /// A message of quorum rounds. Rejected through the router (counted, logged, dropped): a kind
  /// sent to the wrong node, a payload of the wrong size, a version not above the newest, a
  /// second last Delta, a Delta from a dropped peer.
  void on_message(std::size_t from, net::Message&& message);
  /// A peer failed: the leader's failure fails this node; another's drops it (the majority rule
  /// applies: cut off below it).
  void on_failure(const PeerError& error);
  /// Whether the job ended for this node: `quorum` nodes (at most the live ones) have sent their
  /// last Delta, so a node still training stops at its next iteration boundary and ends too
  /// (the leader tells it; a straggler does not hold the job's end back). Any thread.
  [[nodiscard]] bool ended() const noexcept { return ended_.load(std::memory_order_acquire); }
  /// Throws the cut-off error if this node was cut off (SyncStage::check_quorum).
  void check() const { membership_.check(); }

  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }
  [[nodiscard]] bool leader() const noexcept { return rank_ == kQuorumLeader; }
  [[nodiscard]] QuorumFigures figures() const;
  /// Peers dropped so far.
  [[nodiscard]] std::uint64_t failures() const noexcept { return membership_.failures(); }

 private:
  struct Waiting {
    std::size_t rank;
    std::uint64_t from;  // the version its round started from
    net::Payload delta;
  };
  /// Whether a merge is due (leader; lock held): Deltas from enough distinct nodes wait, and not
  /// every live node has ended (then the final merge takes them).
  [[nodiscard]] bool due_locked() const;
  /// The leader's merge thread: waits for a merge to be due, merges (outer step on the mean of
  /// the Deltas that wait), makes the new version and sends it to every live peer.
  void merge_loop();
  /// Nodes live and still training (leader; lock held).
  [[nodiscard]] std::size_t training_locked() const;
  /// The waiting await()'s completion, taken when it may go on or must fail (lock held); run()
  /// fires it once the lock is released.
  struct Wake {
    std::optional<engine::Completion> done;
    std::exception_ptr error;
    void run() const;
  };
  [[nodiscard]] Wake wake_locked();
  /// Leader: a quorum of nodes has ended and the others were not told yet (lock held).
  [[nodiscard]] bool end_due_locked() const;
  /// Leader: every live node has sent its last Delta (lock held).
  [[nodiscard]] bool all_final_locked() const;
  /// Leader: the sum of `deltas` (sorted by rank, then version) over `count` (the live nodes)
  /// into mean_, each weighed by 1 / (1 + its staleness) when `version` (the newest) is given.
  void mean_of(const std::vector<Waiting>& deltas, std::size_t count,
               std::optional<std::uint64_t> version = std::nullopt);
  /// Fails this node (the first error wins); the waiting await() with it (lock held).
  [[nodiscard]] Wake fail_locked(std::exception_ptr error);

  LaneRouter& router_;
  LaneId lane_;
  std::size_t rank_, nodes_, quorum_, floats_, states_;
  OuterOptimizer& outer_;
  ako::Membership membership_;
  std::vector<float> global_;  // leader: theta_g (the merge thread's, then finish()'s)
  std::vector<float> mean_;    // leader: scratch of a merge (likewise)
  std::uint64_t adopted_ = 0;  // the version this node's replica started from

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t version_ = 0;       // newest version made (leader) or received
  net::Payload newest_;             // the newest version's model
  bool merging_ = false;            // leader: a merge under way outside the lock
  bool stop_ = false;               // leader: the merge thread ends
  bool end_sent_ = false;           // leader: the nodes still training were told to end
  std::vector<std::size_t> joins_;  // leader: ranks that asked for the newest version
  // Leader: per rank, the version a Delta of it started from while it waits for a newer model
  // (the model goes to a node once a round, in answer to its Delta: not every merge's, which on
  // a slow link queued behind one another and held the final model back past the end).
  std::vector<std::optional<std::uint64_t>> wants_;
  std::vector<bool> final_sent_to_;  // leader: the final model went to this rank
  std::vector<bool> acked_;          // leader: this rank has the final model
  net::Payload join_state_;          // a rejoining node: the leader's answer, once in
  std::uint64_t join_iteration_ = 0;
  std::uint64_t join_version_ = 0;
  std::atomic<std::uint64_t> iterations_{0};
  std::atomic<bool> ended_{false};
  std::vector<Waiting> waiting_;  // leader: Deltas not yet merged
  std::vector<bool> final_sent_;  // leader: ranks that sent their last Delta
  std::vector<Waiting> finals_;   // leader: the last Deltas (with the layer states)
  net::Payload final_model_;      // the final model and states, once in
  std::optional<engine::Completion> waiter_;
  std::exception_ptr failed_;
  QuorumFigures figures_;
  std::thread merger_;  // leader only; last member: started once the others exist
};

}  // namespace gradmesh::sync::local

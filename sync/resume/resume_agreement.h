#pragma once
// The start-up agreement of a resumed job on the checkpoint every node continues from (Poseidon
// arXiv'15 sec. 4.4: "the entire distributed system can be restarted from the last checkpoint
// exactly"): each node may hold different checkpoints (one crashed mid-write, one kept fewer), so
// the nodes exchange the iterations of their valid checkpoints and all take the newest common one.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "sync/collective/all_gather.h"
#include "sync/lane_router.h"

namespace gradmesh::sync {

/// The lane the agreement's messages travel on.
inline constexpr std::string_view kResumeLane = "resume";

/// Routes kResumeLane on a node's router (before the transport starts, as the link probe) and
/// exchanges lists of numbers among all nodes, in rounds (a collective::AllGather): round 0 agrees
/// on the iteration to resume from (--resume); a BSP job's checkpoint boundaries exchange the join
/// requests each node has seen, with the boundary's iteration as the round (apps/pipeline: a
/// restarted node rejoins at the next checkpoint boundary).
///
/// Thread safety: exchange() from the node's thread; the handler runs on the transport's delivery
/// thread (internally locked). Errors: a message that is not a list of numbers (or as
/// collective::AllGather: a second list of one round, a list of a round already finished, or of a
/// new round while 4 rounds' lists wait already) is rejected through the router.
class ResumeAgreement {
 public:
  /// `timeout_s`: how long exchange() waits for every peer's list (seconds, > 0).
  ResumeAgreement(LaneRouter& router, double timeout_s);
  ResumeAgreement(const ResumeAgreement&) = delete;
  ResumeAgreement& operator=(const ResumeAgreement&) = delete;

  /// Sends `valid` (the iterations of this node's valid checkpoints, any order; or any other list
  /// of numbers) to every peer as round `round` and returns, once every peer's list of that round
  /// is in, each node's list (index = rank), the same on every node. Every node must call it for
  /// the same rounds, in increasing order (a peer's list of a later round waits for its call).
  /// One node: {valid} at once. Throws PeerError for a failed or silent peer (net.connect_timeout,
  /// at least 60 s), ContractError for a round not above the previous call's.
  [[nodiscard]] std::vector<std::vector<std::uint64_t>> exchange(
      std::span<const std::uint64_t> valid, std::uint64_t round = 0);

  /// The evaluation's exchange (apps/pipeline: the test set split across the nodes): sends
  /// `counts` (this node's figures, any list of numbers) as round `round` of a gather of its own
  /// (its rounds independent of exchange()'s) and returns every node's list (index = rank), the
  /// same on every node. As exchange(): every node calls it for the same rounds, in increasing
  /// order; one node gets {counts}. Throws PeerError naming a failed or silent peer.
  [[nodiscard]] std::vector<std::vector<std::uint64_t>> exchange_evaluation(
      std::span<const std::uint64_t> counts, std::uint64_t round);

  /// The end of a BSP job (apps/pipeline): every node's layer states (batch normalization's running
  /// statistics, tasks::Model::save_layer_states; `states` floats, the same count on every node)
  /// as round `round` of a gather of its own, returned index = rank. As exchange_evaluation().
  [[nodiscard]] std::vector<std::vector<float>> exchange_layer_states(std::span<const float> states,
                                                                      std::uint64_t round);

  /// Synchronized batch normalization (model.sync_batch_norm, tasks::BatchNorm's SyncBN): every
  /// node's `mine` (a layer's per-channel figures, the same count on every node) as round `round`
  /// of a gather of its own, written into `all` (nodes x mine.size() floats, row r rank r's). As
  /// exchange_evaluation(); called from the compute task of a layer's forward or backward.
  /// Throws ContractError when a peer's list has another count, PeerError as exchange().
  void exchange_batch_statistics(std::span<const float> mine, std::uint64_t round,
                                 std::span<float> all);

  /// The newest iteration in every list of `lists` (index = rank). Throws CheckpointError naming
  /// every rank's iterations when no iteration is common to all.
  [[nodiscard]] static std::uint64_t newest_common(
      const std::vector<std::vector<std::uint64_t>>& lists);

 private:
  LaneRouter& router_;
  double timeout_s_;
  LaneId lane_;
  collective::AllGather lists_;        // kind 0: exchange()
  collective::AllGather evaluations_;  // kind 1: exchange_evaluation()
  collective::AllGather states_;       // kind 2: exchange_layer_states()
  collective::AllGather statistics_;   // kind 3: exchange_batch_statistics()
};

}  // namespace gradmesh::sync

#pragma once
// The start-up agreement of a resumed job on the checkpoint every node continues from (Poseidon
// arXiv'15 sec. 4.4: "the entire distributed system can be restarted from the last checkpoint
// exactly"): each node may hold different checkpoints (one crashed mid-write, one kept fewer), so
// the nodes exchange the iterations of their valid checkpoints and all take the newest common one.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "sync/channel.h"

namespace gradmesh::sync {

/// The stage the agreement's messages travel on.
inline constexpr std::string_view kResumeStage = "resume";

/// Routes kResumeStage on a node's channel (before the transport starts, as the link probe) and
/// agrees once on the iteration to resume from.
///
/// Thread safety: agree() from the node's thread; the handler runs on the transport's delivery
/// thread (internally locked). Errors: a message that is not a list of iterations is rejected
/// through the channel.
class ResumeAgreement {
 public:
  /// `timeout_s`: how long agree() waits for every peer (seconds, > 0).
  ResumeAgreement(Channel& channel, double timeout_s);
  ResumeAgreement(const ResumeAgreement&) = delete;
  ResumeAgreement& operator=(const ResumeAgreement&) = delete;

  /// Sends `valid` (the iterations of this node's valid checkpoints, any order) to every peer and
  /// returns, once every peer's list is in, each node's list (index = rank), the same on every
  /// node. One node: {valid} at once. Throws PeerError for a failed or silent peer.
  [[nodiscard]] std::vector<std::vector<std::uint64_t>> exchange(
      std::span<const std::uint64_t> valid);

  /// The newest iteration in every list of `lists` (index = rank). Throws CheckpointError naming
  /// every rank's iterations when no iteration is common to all.
  [[nodiscard]] static std::uint64_t newest_common(
      const std::vector<std::vector<std::uint64_t>>& lists);

 private:
  void on_message(std::size_t from, net::Message&& message);

  Channel& channel_;
  std::chrono::duration<double> timeout_;
  StageId stage_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::optional<std::vector<std::uint64_t>>> received_;  // by rank
  std::optional<PeerError> failure_;
};

}  // namespace gradmesh::sync

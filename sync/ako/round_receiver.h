#pragma once
// The receiving side of Ako's exchange (Ako SoCC'16 Algorithm 1, lines 12-14), for AkoStage.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "net/message.h"
#include "sync/ako/staging_delta.h"
#include "sync/ako/staleness_clocks.h"

namespace gradmesh::sync::ako {

/// Checks and applies the rounds a node receives from its peers: a partition round (kPartition:
/// range k of p, whose p the message names, since a peer may send at p1 or the final p before or
/// after this node switches) or a full round (kFullRound: every float the receiver lacks). A
/// round is staged into the delta as -lr x its values (line 13) and advances the sender's clock
/// (line 14); a peer that rejoined re-enters the clocks at its first round (readmit()). A round
/// that breaks the protocol (p or k out of range, a payload of the wrong size, a round tag not
/// after the last; a full round may repeat the last tag) is refused and changes nothing.
///
/// Thread safety: any thread (an internal mutex); the delta and clocks have their own.
class RoundReceiver {
 public:
  /// For a job of `nodes` nodes and a model of `floats` floats; stages into `staging` and
  /// advances `clocks`, which must outlive it.
  RoundReceiver(std::size_t nodes, std::size_t floats, StagingDelta& staging,
                StalenessClocks& clocks);

  /// Applies a kPartition round from `from` at learning rate `lr`. Returns "" or why refused.
  [[nodiscard]] std::string partition(std::size_t from, const net::Message& message, float lr);
  /// Applies a kFullRound from `from` at learning rate `lr`. Returns "" or why refused.
  [[nodiscard]] std::string full_round(std::size_t from, const net::Message& message, float lr);
  /// `peer` restarted and rejoined: its rounds start again from its donor's clock, and it
  /// re-enters the clocks with its first round (until then it holds no one back).
  void readmit(std::size_t peer);

  [[nodiscard]] std::uint64_t partitions_received() const noexcept { return partitions_.load(); }
  [[nodiscard]] std::uint64_t full_rounds_received() const noexcept { return full_rounds_.load(); }

 private:
  /// s_from = round (line 14), a rejoined peer readmitted first. Under mutex_.
  void advance_locked(std::size_t from, std::uint64_t round);

  const std::size_t floats_;
  StagingDelta& staging_;
  StalenessClocks& clocks_;
  std::mutex mutex_;
  std::vector<std::uint64_t> last_round_;  // per peer: the last round tag received
  std::vector<char> readmit_;              // per peer: rejoined; back in the clocks at its first
  std::atomic<std::uint64_t> partitions_{0};
  std::atomic<std::uint64_t> full_rounds_{0};
};

}  // namespace gradmesh::sync::ako

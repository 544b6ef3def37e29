#pragma once
// Membership with a majority: whether a node that lost contact with peers may go on training, or
// is cut off and must stop (docs/failures.md, "Only a majority goes on").

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"

namespace gradmesh::sync {

/// The error of a node cut off from the majority (Quorum::cut_off_message's text): it stops and
/// writes nothing for the job, no metrics, no checkpoint, no failure file (the majority's results
/// are the job's).
class CutOffError : public Error {
 public:
  using Error::Error;
};

/// The rule a node applies before it goes on without peers it lost: the quorum of Raft (Ongaro and
/// Ousterhout, USENIX ATC'14, sec. 5) and Viewstamped Replication (Liskov and Cowling, MIT TR 2012,
/// sec. 4): more than half of `members` live, this node included. A node on the small side of a
/// partition, or one woken from a pause after its peers went on without it, sees all or most of
/// its peers fail; without the rule it would train on alone and write results that look like the
/// job's. In a split into two equal halves neither goes on. `net.min_nodes`, when set, replaces
/// the majority with a fixed minimum (Horovod elastic's `min_np`): a user who would rather risk two
/// halves training apart than lose the job to a second failure says so.
/// Plain value; thread safety: none needed.
struct Quorum {
  std::size_t members = 1;               ///< nodes of the membership counted against (>= 1)
  std::optional<std::size_t> min_nodes;  ///< net.min_nodes; nullopt: a majority of `members`

  /// Live nodes needed to go on, this node included: min_nodes, else members / 2 + 1.
  [[nodiscard]] std::size_t needed() const noexcept {
    return min_nodes ? *min_nodes : members / 2 + 1;
  }
  /// Whether `live` nodes (this one included) may go on.
  [[nodiscard]] bool holds(std::size_t live) const noexcept { return live >= needed(); }
  /// The error of a node that may not go on: names `lost` (the peers gone, "rank r (host:port)"
  /// or "host:port"), how many of `members` that is, `last` (the latest failure's message), the
  /// rule, and that this node writes no metrics or checkpoints. Starts "cut off from the
  /// majority: " (or, with min_nodes, "too few nodes left: ").
  [[nodiscard]] std::string cut_off_message(const std::vector<std::string>& lost,
                                            const std::string& last) const;
};

}  // namespace gradmesh::sync

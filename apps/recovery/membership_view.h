#pragma once
// Where a node stands in its job's membership: run_with_recovery()'s state over the views it
// runs (apps/pipeline/pipeline.h), kept apart from the command line (NodeOptions), which only
// the user sets.

#include <cstddef>
#include <filesystem>

namespace gradmesh::app {

/// A node's membership view (README "When a peer fails"): set by run_with_recovery() for each
/// view it starts, read by the Pipeline of that view; a Pipeline made by a user's program starts
/// at the default (view 0, nothing rolled back, no restarted node admitted). Plain value type.
struct MembershipView {
  /// The view's number, 0 at the start, one more after each rollback or growth; the transport's
  /// handshake compares it ("view" in the metrics).
  std::size_t view = 0;
  /// How many times this node rolled back after a peer failed ("rollbacks" in the metrics).
  std::size_t rollbacks = 0;
  /// View 0's checkpoint.dir under a BSP strategy: at every checkpoint boundary the nodes
  /// exchange the join requests filed there and take restarted nodes back
  /// (apps/recovery/join_request.h). Empty: no restarted node is admitted.
  std::filesystem::path join_root;
  /// Restarted nodes this node's views took back ("rejoins_admitted" in the metrics).
  std::size_t rejoins_admitted = 0;
  /// Whether this node is one, admitted after its --rejoin ("rejoined" in the metrics).
  bool rejoined = false;
};

}  // namespace gradmesh::app

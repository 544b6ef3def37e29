#pragma once
// Where a node stands in its job's membership: run_with_recovery()'s state over the views it
// runs (apps/pipeline/pipeline.h), kept apart from the command line (NodeOptions), which only
// the user sets.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace gradmesh::app {

/// What a node refused, as the metrics file counts it (docs/metrics.md): frames that failed to
/// decode or verify their header, inbound connections refused in the handshake, sealed frames
/// whose tag did not verify, well-formed messages that broke a lane's protocol. Plain value type.
struct FaultCounters {
  std::uint64_t malformed_frames = 0;
  std::uint64_t rejected_connections = 0;
  std::uint64_t unverified_frames = 0;
  std::uint64_t rejected_messages = 0;
  FaultCounters& operator+=(const FaultCounters& o) noexcept {
    malformed_frames += o.malformed_frames;
    rejected_connections += o.rejected_connections;
    unverified_frames += o.unverified_frames;
    rejected_messages += o.rejected_messages;
    return *this;
  }
};

/// A node's membership view (README "When a peer fails"): set by run_with_recovery() for each
/// view it starts, read by the Pipeline of that view; a Pipeline made by a user's program starts
/// at the default (view 0, nothing rolled back, no restarted node admitted). Plain value type.
struct MembershipView {
  /// The view's number, 0 at the start, one more after each rollback or growth; the transport's
  /// handshake compares it ("view" in the metrics).
  std::size_t view = 0;
  /// The view's members, beside its number: 8 hex digits of a CRC-32 of its peer list in rank
  /// order (view_id(), apps/recovery/join_request.h); "" in view 0. The halves of a split (each
  /// going on alone under net.min_nodes below the majority) number their views alike but never
  /// share an id: their checkpoint folders (view_dir) and, in a minority, their result files
  /// (file_tag) differ ("view_id" in the metrics).
  std::string id;
  /// Whether the view holds more than half of the nodes of the last view that started here (the
  /// quorum rule's base, sync::Quorum): what the default rule allows. Only net.min_nodes below the
  /// majority lets a node go on in one that does not (a half of a split).
  bool majority = true;
  /// How many times this node rolled back after a peer failed ("rollbacks" in the metrics).
  std::size_t rollbacks = 0;
  /// How many times this node rolled back after a non-finite loss or update (job.on_nonfinite =
  /// "rollback"; at most once: a second stops the job). Counted in `rollbacks` too.
  std::size_t nonfinite_rollbacks = 0;
  /// View 0's checkpoint.dir under a BSP strategy: at every checkpoint boundary the nodes
  /// exchange the join requests filed there and take restarted nodes back
  /// (apps/recovery/join_request.h). Empty: no restarted node is admitted.
  std::filesystem::path join_root;
  /// Restarted nodes this node's views took back ("rejoins_admitted" in the metrics).
  std::size_t rejoins_admitted = 0;
  /// Whether this node is one, admitted after its --rejoin ("rejoined" in the metrics).
  bool rejoined = false;
  /// What the transports and stages of this node's earlier views refused (run_with_recovery adds
  /// each view's before it leaves it): the metrics' counters are these plus the last view's, the
  /// node's totals over the job.
  FaultCounters earlier_views;

  /// What this node's result files (metrics, failure, parameters, trace) carry after
  /// "node-<rank>" and the like: "" in a view that holds a majority, else ".view-<view>-<id>", so
  /// a minority (the other half of a split included) never writes the majority's paths, nor two
  /// halves each other's.
  [[nodiscard]] std::string file_tag() const {
    return majority ? std::string() : ".view-" + std::to_string(view) + "-" + id;
  }
};

}  // namespace gradmesh::app

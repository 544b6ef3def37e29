#pragma once
// The composition root of a node (internal to apps/pipeline; Pipeline::build()): from the job
// config, the transport (net.*, security.*), the lane router with the start-up probe and the
// resume agreement, the connection to every peer, the planner's measurements (planner.probe),
// the sync stage (sync.strategy), the iteration graph and the checkpoint sections.

#include <optional>

#include "apps/pipeline/node_state.h"
#include "sync/probe/link_probe.h"

namespace gradmesh::app::detail {

/// Fills a NodeState (model, optimizer and source already set) with everything its training loop
/// runs. Every node of a job builds at once: the configuration errors every node finds alike are
/// raised before any connection, and from the connection on, a node that fails tells its peers
/// why (an Abort frame) before it throws.
///
/// Thread safety: none (the node's thread). Errors: ConfigError naming the key or flag, PeerError
/// naming the peer (rank and address), CheckpointError for --resume.
class NodeBuilder {
 public:
  explicit NodeBuilder(NodeState& state) : s_(state) {}

  /// Builds the node once (ContractError without a source or when built already).
  void build();

 private:
  /// The TCP transport's options from net.* and security.*, the job secret; logs the security
  /// in force. Requires more than one node.
  void make_transport();
  /// The start-up errors every node finds alike (--rejoin's, the strategy's own checks).
  void check_start() const;
  /// Starts the transport (every peer connected, or PeerError) and, with --resume, agrees on
  /// the checkpoint to load.
  void connect();
  /// The planner's measurements (planner.probe, not on a rejoining node), and each link's rate
  /// given to the transport (how long one frame may hold it).
  [[nodiscard]] std::optional<sync::JobMeasurements> measure();
  /// The sync stage, the iteration graph and the checkpoint sections and writer.
  void make_stage(const std::optional<sync::JobMeasurements>& measured);

  NodeState& s_;
};

}  // namespace gradmesh::app::detail

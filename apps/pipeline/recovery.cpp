// run_with_recovery (declared in pipeline.h): a node's job that survives failed peers under the
// BSP strategies (issue 13; README "When a peer fails").
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/pipeline/pipeline.h"
#include "engine/checkpoint.h"
#include "engine/error.h"

namespace gradmesh::app {

namespace {

bool is_bsp(const std::string& strategy) {
  return strategy == "ps" || strategy == "poseidon" || strategy == "allreduce" ||
         strategy == "auto";
}

/// Whether `dir` holds a checkpoint that verifies in any node-<r> folder, r < nodes.
bool holds_checkpoint(const std::filesystem::path& dir, std::size_t nodes) {
  for (std::size_t r = 0; r < nodes; ++r) {
    std::vector<std::string> problems;
    if (!engine::CheckpointStore(dir, r).valid_iterations(problems).empty()) return true;
  }
  return false;
}

}  // namespace

void run_with_recovery(NodeOptions options, const std::function<void(Pipeline&)>& configure) {
  // Checkpoint folders, one per view (node set): view 0 is checkpoint.dir, view k its
  // "view-<k>" subfolder, so no folder mixes checkpoints of two node counts.
  std::vector<std::filesystem::path> views;
  for (;;) {
    std::optional<Pipeline> pipeline;
    pipeline.emplace(options);
    const JobConfig& config = pipeline->config();
    if (views.empty()) views.emplace_back(config.checkpoint.dir);
    configure(*pipeline);
    pipeline->build();  // a peer lost at start-up is an error: nothing to roll back to
    try {
      pipeline->run();
      return;
    } catch (const PeerError& e) {
      const std::size_t nodes = pipeline->nodes();
      const std::size_t rank = pipeline->rank();
      const std::size_t dead = e.root_rank();
      if (!is_bsp(config.sync.strategy) || config.checkpoint.dir.empty() || nodes < 2 ||
          dead >= nodes || dead == rank) {
        throw;
      }
      // The newest view that holds a checkpoint: the job rolls back to it (resumed on n - 1).
      // View k had one node more than view k + 1; this one (the last) has `nodes`.
      std::optional<std::filesystem::path> from;
      for (std::size_t k = views.size(); k-- > 0 && !from;) {
        if (holds_checkpoint(views[k], nodes + (views.size() - 1 - k))) from = views[k];
      }
      if (!from) {
        spdlog::error("{}: no checkpoint written yet to roll back to", e.what());
        throw;
      }
      std::vector<std::string> peers = pipeline->peer_addresses();
      const std::string dead_address = peers[dead];
      peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(dead));
      const std::size_t new_rank = rank > dead ? rank - 1 : rank;
      pipeline.reset();  // closes this view's transport and waits for a checkpoint write
      views.push_back(views.front() / ("view-" + std::to_string(views.size())));
      std::string joined;
      for (const std::string& p : peers) joined += (joined.empty() ? "" : ",") + p;
      options.peers = joined;
      options.peers_file.clear();
      options.rank = static_cast<long long>(new_rank);
      options.resume = *from;
      options.overrides.push_back("checkpoint.dir=" + views.back().string());
      ++options.rollbacks;
      spdlog::warn("peer rank {} ({}) is gone ({}): rolling back to the newest checkpoint in {} "
                   "and going on with {} nodes; this node is rank {} of them (view {})",
                   dead, dead_address, e.what(), from->string(), peers.size(), new_rank,
                   views.size() - 1);
    }
  }
}

}  // namespace gradmesh::app

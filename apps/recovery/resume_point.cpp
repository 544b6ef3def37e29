#include "apps/recovery/resume_point.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/recovery/resplit.h"
#include "engine/error.h"
#include "engine/key_value_text.h"
#include "sync/sync_stage.h"

namespace gradmesh::app {

namespace {

/// The keys whose values differ between two training_text()s ("key = value" lines), for the
/// error of a --resume under another config.
std::string config_difference(const std::string& saved, const std::string& current) {
  const std::string out = key_value_difference(saved, current, "in the checkpoint", "now");
  return out.empty() ? "(the same keys and values: written by another gradmesh version?)" : out;
}

/// The node count of the job that wrote `dir`: the header of the newest checkpoint that verifies
/// in this node's folder, else in rank 0's (a node the old job did not have); nullopt if neither
/// holds one.
std::optional<std::size_t> written_by(const std::filesystem::path& dir, std::size_t rank) {
  for (const std::size_t r : {rank, std::size_t{0}}) {
    const CheckpointStore store(dir, r);
    std::vector<std::string> problems;
    const std::vector<std::uint64_t> valid = store.valid_iterations(problems);
    if (!valid.empty()) return store.load(valid.front()).header.nodes;
  }
  return std::nullopt;
}

/// The store's iterations whose checkpoints verify, newest first; warns once per file that does
/// not (torn, corrupt, another version) and is skipped.
std::vector<std::uint64_t> valid_iterations_warned(const CheckpointStore& store) {
  std::vector<std::string> problems;
  std::vector<std::uint64_t> valid = store.valid_iterations(problems);
  for (const std::string& p : problems) {
    spdlog::warn("--resume: skipping a checkpoint that does not verify: {}", p);
  }
  return valid;
}

void check_config(const Checkpoint& checkpoint, const std::string& path, const JobConfig& config) {
  const CheckpointHeader& h = checkpoint.header;
  if (h.config_fingerprint != config.training_fingerprint() ||
      h.config_text != config.training_text()) {
    throw ConfigError(path + ": written under another config: " +
                      config_difference(h.config_text, config.training_text()) +
                      " (only job.name, job.epochs, job.max_iterations, checkpoint.*, net.*, "
                      "security.*, compute.threads and data.test_limit may change on --resume)");
  }
}

/// agree_on_resume() for the checkpoints of a job of `old_nodes` != `nodes`.
ResumePoint agree_on_resplit(const std::filesystem::path& dir, std::size_t rank, std::size_t nodes,
                             std::size_t old_nodes, const JobConfig& config,
                             sync::ResumeAgreement& agreement) {
  const sync::StrategyTraits& traits = sync::strategy_traits(config.sync.strategy);
  if (!traits.rolls_back) {
    throw CheckpointError("--resume " + dir.string() + ": written by a job of " +
                          std::to_string(old_nodes) + " nodes, this one has " +
                          std::to_string(nodes) + ": sync.strategy = \"" + config.sync.strategy +
                          "\" cannot change the node count");
  }
  // Every node of the old job must be readable here (a shared folder, or copies of each
  // node-<rank> folder): the iterations valid in all of them.
  std::vector<CheckpointStore> stores;
  std::vector<std::uint64_t> valid;
  for (std::size_t r = 0; r < old_nodes; ++r) {
    stores.emplace_back(dir, r);
    std::vector<std::uint64_t> mine = valid_iterations_warned(stores.back());
    if (r == 0) {
      valid = std::move(mine);
    } else {
      std::erase_if(valid, [&](std::uint64_t t) {
        return std::find(mine.begin(), mine.end(), t) == mine.end();
      });
    }
  }
  const auto lists = agreement.exchange(valid);
  std::uint64_t iteration = 0;
  try {
    iteration = sync::ResumeAgreement::newest_common(lists);
  } catch (const CheckpointError& e) {
    throw CheckpointError("--resume " + dir.string() + ": " + e.what() + " (resuming the " +
                          std::to_string(old_nodes) + "-node job's checkpoints on " +
                          std::to_string(nodes) +
                          " nodes needs every one of its node-<rank> "
                          "folders under " +
                          dir.string() + ")");
  }
  std::vector<Checkpoint> old;
  for (std::size_t r = 0; r < old_nodes; ++r) {
    const std::string path = stores[r].path(iteration).string();
    old.push_back(stores[r].load(iteration));
    const CheckpointHeader& h = old.back().header;
    if (h.nodes != old_nodes || h.rank != r) {
      throw CheckpointError(path + ": written by rank " + std::to_string(h.rank) + " of " +
                            std::to_string(h.nodes) + " nodes, expected rank " + std::to_string(r) +
                            " of " + std::to_string(old_nodes));
    }
    check_config(old.back(), path, config);
  }
  const std::string source = stores[0].path(iteration).string() + " and the other " +
                             std::to_string(old_nodes - 1) + " node(s) of that job";
  if (traits.resplit_by_replica) {
    ResumePoint point{resplit_checkpoint(old, rank, nodes, source, ResplitKind::kByReplica), source,
                      old_nodes};
    spdlog::info(
        "--resume: the {}-node job's checkpoints of its iteration {} re-split over {} nodes "
        "(this node takes the replica, optimizer and outer state of the old job's rank {}{})",
        old_nodes, iteration, nodes, rank < old_nodes ? rank : 0,
        rank < old_nodes ? "" : ": a copy, without that node's own error-feedback residual");
    return point;
  }
  ResumePoint point{resplit_checkpoint(old, rank, nodes, source), source, old_nodes};
  spdlog::info(
      "--resume: the {}-node job's checkpoints of its iteration {} re-split over {} nodes "
      "(the replica, the optimizer's velocity merged from every node, the KV chunks "
      "re-sharded by this job's plan)",
      old_nodes, iteration, nodes);
  return point;
}

}  // namespace

ResumePoint agree_on_resume(const std::filesystem::path& dir, std::size_t rank, std::size_t nodes,
                            const JobConfig& config, sync::ResumeAgreement& agreement) {
  const std::optional<std::size_t> old_nodes = written_by(dir, rank);
  if (old_nodes && *old_nodes != nodes) {
    return agree_on_resplit(dir, rank, nodes, *old_nodes, config, agreement);
  }
  const CheckpointStore store(dir, rank);
  const std::vector<std::uint64_t> valid = valid_iterations_warned(store);
  const auto lists = agreement.exchange(valid);
  std::uint64_t iteration = 0;
  try {
    iteration = sync::ResumeAgreement::newest_common(lists);
  } catch (const CheckpointError& e) {
    throw CheckpointError("--resume " + dir.string() + ": " + e.what() + " (this node looked in " +
                          store.node_dir().string() + ")");
  }
  if (iteration != valid.front()) {
    spdlog::warn(
        "--resume: iteration {} is the newest checkpoint every node has; this node's "
        "newest valid one is {}",
        iteration, valid.front());
  }
  const std::string path = store.path(iteration).string();
  Checkpoint checkpoint = store.load(iteration);
  const CheckpointHeader& h = checkpoint.header;
  if (h.nodes != nodes) {  // the folder holds checkpoints of several jobs
    throw CheckpointError(path + ": written by a job of " + std::to_string(h.nodes) +
                          " nodes, this one has " + std::to_string(nodes) +
                          ", and the newest checkpoint in the folder by a job of " +
                          std::to_string(nodes));
  }
  if (h.rank != rank) {
    throw CheckpointError(path + ": written by rank " + std::to_string(h.rank) + ", read by rank " +
                          std::to_string(rank));
  }
  check_config(checkpoint, path, config);
  spdlog::info("--resume: every node continues from iteration {} ({})", iteration, path);
  return ResumePoint{std::move(checkpoint), path, 0};
}

void adapt_resplit(ResumePoint& point, std::uint64_t per_epoch, sync::SyncStage& stage) {
  GRADMESH_CHECK(point.resplit_from_nodes != 0, "adapt_resplit: not a re-split checkpoint");
  Checkpoint& c = point.checkpoint;
  const auto cursor = c.sections.find("cursor");
  if (cursor == c.sections.end()) {
    throw CheckpointError(point.source + ": no 'cursor' section");
  }
  // IterationGraph's state: iterations done, iterations per epoch.
  engine::StateReader in(cursor->second, point.source + ", section 'cursor'");
  const std::uint64_t done = in.read_u64();
  const std::uint64_t per_epoch_old = in.read_u64();
  const std::uint64_t now = rescale_iteration(done, per_epoch_old, per_epoch);
  engine::StateWriter out;
  out.write_u64(now);
  out.write_u64(per_epoch);
  cursor->second.assign(out.bytes().begin(), out.bytes().end());
  if (sync::strategy_traits(std::string(stage.name())).resplit_by_replica) {
    // The old rank's own stage state (resplit_checkpoint), told whether it is a copy.
    stage.prepare_resplit(point.resplit_from_nodes, c.header.rank >= point.resplit_from_nodes);
  } else {
    // This job's plan (the KV chunks re-sharded over its nodes): loading it refreshes the shards.
    out.clear();
    stage.save_state(out);
    c.sections["sync"].assign(out.bytes().begin(), out.bytes().end());
  }
  spdlog::info(
      "--resume: the {}-node job's iteration {} ({} per epoch) is this job's iteration {} "
      "({} per epoch: the same epoch, the same fraction of it)",
      point.resplit_from_nodes, done, per_epoch_old, now, per_epoch);
}

}  // namespace gradmesh::app

// Pipeline's checkpoints and --resume (README "Checkpoints and resume"; Poseidon arXiv'15
// sec. 4.4): the agreement on the checkpoint to resume from, the pipeline's and the user's
// sections, and the writes in the background.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/pipeline/pipeline.h"
#include "apps/pipeline/pipeline_state.h"
#include "apps/recovery/checkpoint_file.h"
#include "apps/recovery/join_request.h"
#include "apps/recovery/resplit.h"
#include "engine/error.h"
#include "sync/resume/resume_agreement.h"
#include "sync/sync_stage.h"

namespace gradmesh::app {

namespace {

using Clock = std::chrono::steady_clock;

/// The keys whose values differ between two training_text()s ("key = value" lines), for the
/// error of a --resume under another config.
std::string config_difference(const std::string& saved, const std::string& current) {
  const auto parse = [](const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const std::size_t eq = line.find(" = ");
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
    }
    return out;
  };
  const auto a = parse(saved), b = parse(current);
  std::string out;
  const auto add = [&out](const std::string& key, const std::string& then, const std::string& now) {
    out += (out.empty() ? "" : "; ") + key + " = " + then + " in the checkpoint, " + now + " now";
  };
  for (const auto& [key, value] : a) {
    const auto it = b.find(key);
    if (it == b.end())
      add(key, value, "no such key");
    else if (it->second != value)
      add(key, value, it->second);
  }
  for (const auto& [key, value] : b) {
    if (!a.contains(key)) add(key, "no such key", value);
  }
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

}  // namespace

void Pipeline::agree_on_checkpoint() {
  State& s = *state_;
  const std::filesystem::path& dir = *s.options.resume;
  const std::optional<std::size_t> old_nodes = written_by(dir, s.rank);
  if (old_nodes && *old_nodes != s.nodes()) {
    agree_on_resplit(*old_nodes);
    return;
  }
  const CheckpointStore store(dir, s.rank);
  const std::vector<std::uint64_t> valid = valid_iterations_warned(store);
  const auto lists = s.agreement->exchange(valid);
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
  if (h.nodes != s.nodes()) {  // the folder holds checkpoints of several jobs
    throw CheckpointError(path + ": written by a job of " + std::to_string(h.nodes) +
                          " nodes, this one has " + std::to_string(s.nodes()) +
                          ", and the newest checkpoint in the folder by a job of " +
                          std::to_string(s.nodes()));
  }
  if (h.rank != s.rank) {
    throw CheckpointError(path + ": written by rank " + std::to_string(h.rank) + ", read by rank " +
                          std::to_string(s.rank));
  }
  check_config(checkpoint, path, s.config);
  spdlog::info("--resume: every node continues from iteration {} ({})", iteration, path);
  s.resume_source = path;
  s.resume_from = std::move(checkpoint);
}

void Pipeline::agree_on_resplit(std::size_t old_nodes) {
  State& s = *state_;
  const std::filesystem::path& dir = *s.options.resume;
  if (!sync::strategy_traits(s.config.sync.strategy).bsp) {
    throw CheckpointError("--resume " + dir.string() + ": written by a job of " +
                          std::to_string(old_nodes) + " nodes, this one has " +
                          std::to_string(s.nodes()) + ": sync.strategy = \"" +
                          s.config.sync.strategy + "\" cannot change the node count");
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
  const auto lists = s.agreement->exchange(valid);
  std::uint64_t iteration = 0;
  try {
    iteration = sync::ResumeAgreement::newest_common(lists);
  } catch (const CheckpointError& e) {
    throw CheckpointError("--resume " + dir.string() + ": " + e.what() + " (resuming the " +
                          std::to_string(old_nodes) + "-node job's checkpoints on " +
                          std::to_string(s.nodes()) +
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
    check_config(old.back(), path, s.config);
  }
  const std::string source = stores[0].path(iteration).string() + " and the other " +
                             std::to_string(old_nodes - 1) + " node(s) of that job";
  s.resume_from = resplit_checkpoint(old, s.rank, s.nodes(), source);
  s.resume_source = source;
  s.resplit_from_nodes = old_nodes;
  spdlog::info(
      "--resume: the {}-node job's checkpoints of its iteration {} re-split over {} nodes "
      "(the replica, the optimizer's velocity merged from every node, the KV chunks "
      "re-sharded by this job's plan)",
      old_nodes, iteration, s.nodes());
}

void Pipeline::adapt_resplit() {
  State& s = *state_;
  Checkpoint& c = *s.resume_from;
  const auto cursor = c.sections.find("cursor");
  if (cursor == c.sections.end()) {
    throw CheckpointError(s.resume_source + ": no 'cursor' section");
  }
  // IterationGraph's state: iterations done, iterations per epoch.
  engine::StateReader in(cursor->second, s.resume_source + ", section 'cursor'");
  const std::uint64_t done = in.read_u64();
  const std::uint64_t per_epoch_old = in.read_u64();
  const std::uint64_t per_epoch = s.graph->iterations_per_epoch();
  const std::uint64_t now = rescale_iteration(done, per_epoch_old, per_epoch);
  engine::StateWriter out;
  out.write_u64(now);
  out.write_u64(per_epoch);
  cursor->second.assign(out.bytes().begin(), out.bytes().end());
  // This job's plan (the KV chunks re-sharded over its nodes): loading it refreshes the shards.
  out.clear();
  s.stage->save_state(out);
  c.sections["sync"].assign(out.bytes().begin(), out.bytes().end());
  spdlog::info(
      "--resume: the {}-node job's iteration {} ({} per epoch) is this job's iteration {} "
      "({} per epoch: the same epoch, the same fraction of it)",
      s.resplit_from_nodes, done, per_epoch_old, now, per_epoch);
}

void Pipeline::add_checkpoint_state(std::string name, engine::Checkpointable& state) {
  State& s = *state_;
  GRADMESH_CHECK(!s.ran, "Pipeline::add_checkpoint_state after run()");
  for (const char* own : {"model", "optimizer", "cursor", "sync"}) {
    GRADMESH_CHECK(name != own, "Pipeline::add_checkpoint_state: '" + name +
                                    "' is one of the pipeline's own sections");
  }
  s.own_states.emplace_back(std::move(name), &state);
}

void Pipeline::write_checkpoint(std::uint64_t iteration, NodeMetrics& metrics) {
  State& s = *state_;
  const auto begin = Clock::now();
  finish_checkpoint_write(metrics);  // the previous file is on disk before its buffer is reused
  s.stage->check_quorum();           // a node cut off from the job writes nothing into its folder
  s.checkpoint_header.iteration = iteration;
  s.checkpoints.save(s.checkpoint_header, s.checkpoint_file);
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  ++metrics.checkpoints_written;
  metrics.checkpoint_bytes = s.checkpoint_file.size();
  metrics.checkpoint_seconds += seconds;
  spdlog::info(
      "checkpoint of iteration {}: {:.2f} MB of state saved in {:.1f} ms (with any wait for "
      "the previous write); writing it in the background",
      iteration, static_cast<double>(s.checkpoint_file.size()) / 1e6, seconds * 1e3);
  // The write (temporary file, fsync, rename) runs beside the next iterations; the state is
  // already a copy, so training goes on at once.
  s.checkpoint_writing = iteration;
  s.checkpoint_write = std::async(std::launch::async, [&s, iteration] {
    const auto start = Clock::now();
    s.store->save(iteration, s.checkpoint_file);
    return std::chrono::duration<double>(Clock::now() - start).count();
  });
}

void Pipeline::finish_checkpoint_write(NodeMetrics& metrics) {
  State& s = *state_;
  if (!s.checkpoint_write.valid()) return;
  const double seconds = s.checkpoint_write.get();  // rethrows the write's CheckpointError
  metrics.checkpoint_write_seconds += seconds;
  spdlog::info("checkpoint of iteration {} written in {:.1f} ms ({})", s.checkpoint_writing,
               seconds * 1e3, s.store->path(s.checkpoint_writing).string());
}

void Pipeline::admit_rejoins(std::uint64_t iteration, bool last, NodeMetrics& metrics) {
  State& s = *state_;
  const std::filesystem::path& root = s.membership.join_root;
  if (root.empty()) return;
  const std::vector<std::string> members = peer_addresses();
  std::vector<JoinRequest> seen;
  for (JoinRequest& request : read_join_requests(root)) {
    const auto live = std::find(members.begin(), members.end(), request.address);
    if (live == members.end()) {
      seen.push_back(std::move(request));
    } else if (s.rank == 0 && !find_join_refusal(root, request)) {
      const std::size_t rank = static_cast<std::size_t>(live - members.begin());
      spdlog::warn(
          "a join request from {} refused: rank {} of view {} has that address and is live",
          request.address, rank, s.membership.view);
      write_join_refusal(root, request,
                         "rank " + std::to_string(rank) + " of view " +
                             std::to_string(s.membership.view) + " has the address " +
                             request.address + " and is live");
    }
  }
  // Every node decides on the union of what each has seen: the same joiners everywhere.
  std::vector<JoinRequest> joiners =
      merge_join_requests(s.agreement->exchange(encode_join_requests(seen), iteration));
  if (joiners.empty()) return;
  std::string who;
  for (const JoinRequest& j : joiners) who += (who.empty() ? "" : ", ") + j.address;
  if (last) {
    spdlog::warn("{} asked to rejoin, but iteration {} is the job's last: refused", who, iteration);
    if (s.rank == 0) {
      for (const JoinRequest& j : joiners) {
        write_join_refusal(root, j,
                           "the job ended at iteration " + std::to_string(iteration) +
                               " before a checkpoint boundary could take this node back");
      }
    }
    return;
  }
  spdlog::warn(
      "{} restarted and asked to rejoin: every node stops at the checkpoint of iteration "
      "{} and goes on from it with {} nodes",
      who, iteration, s.nodes() + joiners.size());
  finish_checkpoint_write(metrics);  // on disk before any node of the grown view reads it
  throw ViewGrowth(iteration, std::move(joiners));
}

}  // namespace gradmesh::app

// run_with_recovery (declared in pipeline.h): a node's job that survives failed peers under the
// strategies that roll back (the BSP ones and local: StrategyTraits::rolls_back), and takes
// restarted ones back at a checkpoint boundary (issue 13; README "When a peer fails").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/pipeline/non_finite_error.h"
#include "apps/pipeline/pipeline.h"
#include "apps/recovery/checkpoint_file.h"
#include "apps/recovery/join_request.h"
#include "engine/error.h"
#include "sync/quorum.h"
#include "sync/sync_stage.h"

namespace gradmesh::app {

namespace {

namespace fs = std::filesystem;

/// How long a node started with --rejoin under a strategy that rolls back waits for a checkpoint
/// boundary to take it back before it gives up, seconds.
constexpr double kAdmissionWaitSeconds = 3600;

/// Whether `strategy` survives failures by rolling back (StrategyTraits::rolls_back).
bool rolls_back(const std::string& strategy) { return sync::strategy_traits(strategy).rolls_back; }

/// A membership view's checkpoint folder and node count.
struct View {
  fs::path dir;
  std::size_t nodes = 0;
};

/// Whether `dir` holds a checkpoint that verifies in any node-<r> folder, r < nodes.
bool holds_checkpoint(const fs::path& dir, std::size_t nodes) {
  for (std::size_t r = 0; r < nodes; ++r) {
    std::vector<std::string> problems;
    if (!CheckpointStore(dir, r).valid_iterations(problems).empty()) return true;
  }
  return false;
}

/// The newest of `views` whose folder holds a checkpoint that verifies, if any.
std::optional<fs::path> newest_checkpoint_view(const std::vector<View>& views) {
  for (std::size_t k = views.size(); k-- > 0;) {
    if (holds_checkpoint(views[k].dir, views[k].nodes)) return views[k].dir;
  }
  return std::nullopt;
}

/// Points `options` and `membership` at membership view `view`: its peers ("host:port" in rank
/// order; they replace --peers-file), this node's `rank` in it, the checkpoint folder to
/// `resume` from, and the view's own checkpoint folder, view_dir(root, view, peers), which it
/// returns. `majority`: whether the view holds more than half of the last view that started
/// here (the quorum rule's base: false only when net.min_nodes below the majority let it go on;
/// MembershipView::majority).
fs::path enter_view(NodeOptions& options, MembershipView& membership, const fs::path& root,
                    std::size_t view, const std::vector<std::string>& peers, std::size_t rank,
                    const fs::path& resume, bool majority) {
  std::string list;
  for (const std::string& p : peers) list += (list.empty() ? "" : ",") + p;
  membership.view = view;
  membership.id = view_id(peers);
  membership.majority = majority;
  options.peers = list;
  options.peers_file.clear();
  options.rank = static_cast<long long>(rank);
  options.resume = resume;
  const fs::path dir = view_dir(root, view, peers);
  // The view's folder replaces the previous view's (the last override of a key wins; the list
  // does not grow by one per view).
  std::erase_if(options.overrides,
                [](const std::string& o) { return o.starts_with("checkpoint.dir="); });
  options.overrides.push_back("checkpoint.dir=" + dir.string());
  return dir;
}

/// --rejoin under a strategy that rolls back: files a join request under `root` (view 0's
/// checkpoint.dir) and waits until a checkpoint boundary of the running job admits it (a view.json
/// naming its request) or refuses it. Points `options` and `membership` at the view it joins (its
/// peers and rank, the checkpoint to resume from); `views` becomes that checkpoint's view and the
/// new one. Throws gradmesh::Error when refused or after kAdmissionWaitSeconds.
void await_admission(NodeOptions& options, MembershipView& membership, const fs::path& root,
                     std::vector<View>& views) {
  std::string address;
  {
    const Pipeline own(options);  // this node's peer list and rank; opens no socket
    address = own.peer_addresses()[own.rank()];
  }
  const JoinRequest request = file_join_request(root, address);
  spdlog::info(
      "--rejoin: asked to rejoin the job as {} (request {:016x} under {}); waiting for "
      "its next checkpoint boundary",
      address, request.nonce, root.string());
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_note = start + std::chrono::seconds(30);
  std::optional<ViewAdmission> admission;
  for (;;) {
    admission = find_view_admission(root, request.nonce);
    if (admission) break;
    if (const auto reason = find_join_refusal(root, request)) {
      withdraw_join_request(root, request);
      throw Error("--rejoin: the job refused to take " + address + " back: " + *reason);
    }
    const auto now = Clock::now();
    if (now - start > std::chrono::duration<double>(kAdmissionWaitSeconds)) {
      withdraw_join_request(root, request);
      throw Error("--rejoin: no checkpoint boundary took " + address + " back within " +
                  std::to_string(static_cast<int>(kAdmissionWaitSeconds)) +
                  " s (is the job running, with checkpoint.dir = " + root.string() + "?)");
    }
    if (now >= next_note) {
      next_note = now + std::chrono::seconds(30);
      spdlog::info("--rejoin: still waiting for a checkpoint boundary to take {} back ({:.0f} s)",
                   address, std::chrono::duration<double>(now - start).count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  withdraw_join_request(root, request);
  const auto me = std::find(admission->peers.begin(), admission->peers.end(), address);
  if (me == admission->peers.end()) {
    throw Error(root.string() + ": view " + std::to_string(admission->view) +
                " admits this node's request but does not list its address " + address);
  }
  const std::size_t rank = static_cast<std::size_t>(me - admission->peers.begin());
  const fs::path dir = enter_view(options, membership, root, admission->view, admission->peers,
                                  rank, admission->resume, /*majority=*/true);
  options.rejoin = false;
  membership.rejoined = true;
  views = {View{admission->resume, admission->resume_nodes}, View{dir, admission->peers.size()}};
  std::printf(
      "[rank %zu] admitted into view %llu of %zu nodes: resuming from the checkpoint of "
      "iteration %llu (%s)\n",
      rank, static_cast<unsigned long long>(admission->view), admission->peers.size(),
      static_cast<unsigned long long>(admission->iteration), admission->resume.string().c_str());
  std::fflush(stdout);
}

/// A node that stops on `error` in `pipeline`'s view, with --metrics-out: writes
/// DIR/failed-node-<rank>.json (metrics.h: write_failed_run) with its totals over the job. Logs,
/// never throws (the error it stops on is the one to report).
void record_failure(const Pipeline& pipeline, const MembershipView& membership,
                    const std::exception& error) noexcept {
  try {
    const auto& dir = pipeline.options().metrics_out;
    if (!dir) return;
    FailedRun failed;
    failed.rank = pipeline.rank();
    failed.nodes = pipeline.nodes();
    failed.job = pipeline.config().job.name;
    failed.strategy = pipeline.config().sync.strategy;
    failed.error = error.what();
    failed.iteration = pipeline.iterations_done();
    failed.view = membership.view;
    failed.view_id = membership.id;
    failed.rollbacks = membership.rollbacks;
    failed.counters = membership.earlier_views;
    failed.counters += pipeline.fault_counters();
    write_failed_run(*dir, failed, membership.file_tag());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
}

/// run_with_recovery()'s views, one after another: `membership` is where this node stands and
/// `pipeline` the view running now (or the last, when it throws).
void run_views(NodeOptions options, const std::function<void(Pipeline&)>& configure,
               MembershipView& membership, std::optional<Pipeline>& pipeline) {
  // Checkpoint folders, one per membership view (node set): view 0's is checkpoint.dir, view k's
  // its "view-<k>-<view_id>" subfolder (join_request.h: view_dir), so no folder mixes checkpoints
  // of two node counts, nor of two halves of a split. Restarted nodes file their join requests
  // under view 0's folder.
  const JobConfig first = load_job_config(options.config, options.overrides);
  const fs::path root = first.checkpoint.dir;
  const bool recoverable = rolls_back(first.sync.strategy) && !root.empty();
  std::vector<View> views;
  // A strategy that takes a restarted node back while it runs (ako, local's quorum rounds) needs
  // no checkpoint boundary: its stage's join() does it.
  if (options.rejoin && rolls_back(first.sync.strategy) &&
      !sync::goes_on_without_failed_peers(first.sync.strategy, first.sync.options)) {
    if (root.empty()) {
      throw ConfigError("--rejoin under sync.strategy = \"" + first.sync.strategy +
                        "\" needs checkpoint.dir (the folder the job's nodes share): such a job "
                        "takes a restarted node back at a checkpoint boundary");
    }
    await_admission(options, membership, root, views);
  }
  if (recoverable) membership.join_root = root;
  // Membership with a majority (the quorum rule of Raft and Viewstamped Replication): a node
  // goes on in a view only with more than half of the members of the last view it ran in. A node
  // cut off from the others (a pause, a partition) sees every one of them fail, one rollback after
  // another; it stops at the first view that would leave it in a minority instead of training
  // alone and writing its metrics over the real job's. In a 2 + 2 split both halves stop.
  // net.min_nodes replaces the majority with a fixed minimum (sync::Quorum).
  std::size_t quorum_base = 0;                // members of the last view that started here
  std::vector<std::string> lost_since_start;  // peers gone since then ("rank r (host:port)")
  for (;;) {
    pipeline.emplace(options, membership);
    const JobConfig& config = pipeline->config();
    if (views.empty()) views.push_back(View{config.checkpoint.dir, pipeline->nodes()});
    configure(*pipeline);
    // A peer lost at the start-up of the first view is an error (nothing to roll back to); at a
    // later one's (a joiner that never came), run() builds and the view rolls back.
    if (membership.view == 0) pipeline->build();
    try {
      pipeline->run();
      return;
    } catch (const ViewGrowth& growth) {
      std::vector<std::string> peers = pipeline->peer_addresses();
      const std::size_t old_nodes = peers.size(), rank = pipeline->rank();
      ViewAdmission admission;
      for (const JoinRequest& j : growth.joiners()) {
        peers.push_back(j.address);
        admission.admitted.push_back(j.nonce);
      }
      membership.earlier_views += pipeline->fault_counters();
      pipeline.reset();  // its transport closed cleanly and its checkpoint is on disk
      admission.view = membership.view + 1;
      admission.peers = peers;
      admission.resume = views.back().dir;
      admission.resume_nodes = old_nodes;
      admission.iteration = growth.iteration();
      // One node tells the joiners where to go (the others go there too) and takes their
      // requests down: a joiner that dies before it connects is not admitted again and again
      // (the grown view's start-up fails on it and rolls back without it).
      if (rank == 0) {
        write_view_admission(root, admission);
        for (const JoinRequest& j : growth.joiners()) withdraw_join_request(root, j);
      }
      views.push_back(View{enter_view(options, membership, root, admission.view, peers, rank,
                                      admission.resume, /*majority=*/true),
                           peers.size()});
      membership.rejoins_admitted += growth.joiners().size();
      spdlog::warn(
          "view {}: {} node(s) rejoined at the checkpoint of iteration {}; going on "
          "with {} nodes from it (this node stays rank {})",
          membership.view, growth.joiners().size(), growth.iteration(), peers.size(), rank);
    } catch (const NonFiniteError& e) {
      // job.on_nonfinite = "rollback": every node found the same non-finite sum at the same
      // iteration and closed cleanly; all go back to the newest checkpoint together, once, with
      // the same peers in a new view (its own folder, as after a failure).
      if (!e.rolls_back()) throw;
      const std::optional<fs::path> from = newest_checkpoint_view(views);
      if (!from) {
        spdlog::error("{}: no checkpoint written yet to roll back to", e.what());
        throw;
      }
      const std::vector<std::string> peers = pipeline->peer_addresses();
      const std::size_t rank = pipeline->rank();
      membership.earlier_views += pipeline->fault_counters();
      pipeline.reset();
      views.push_back(View{enter_view(options, membership, root, membership.view + 1, peers, rank,
                                      *from, membership.majority),
                           peers.size()});
      ++membership.rollbacks;
      ++membership.nonfinite_rollbacks;
      spdlog::warn("{}: rolling back to the newest checkpoint in {} (view {})", e.what(),
                   from->string(), membership.view);
    } catch (const PeerError& e) {
      const std::size_t nodes = pipeline->nodes();
      const std::size_t rank = pipeline->rank();
      const std::size_t dead = e.root_rank();
      if (!recoverable || nodes < 2 || dead >= nodes) throw;
      if (pipeline->connected()) {
        quorum_base = nodes;
        lost_since_start.clear();
      }
      if (dead == rank) {
        // A peer's Abort names this node as the one gone: the others timed it out (it was
        // paused or cut off) and went on without it. Rolling back could only make a job of the
        // minority; stop, as when the majority rule below fails.
        throw sync::CutOffError("cut off from the majority: of the " +
                                std::to_string(quorum_base > 0 ? quorum_base : nodes) +
                                " nodes it ran with, the others report this node (rank " +
                                std::to_string(rank) +
                                ") gone and go on without it, so it stops and writes "
                                "no metrics or checkpoints (last: " +
                                e.what() + ")");
      }
      // The newest view that holds a checkpoint: the job rolls back to it (resumed on n - 1).
      const std::optional<fs::path> from = newest_checkpoint_view(views);
      if (!from) {
        spdlog::error("{}: no checkpoint written yet to roll back to", e.what());
        throw;
      }
      std::vector<std::string> peers = pipeline->peer_addresses();
      const std::string dead_address = peers[dead];
      peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(dead));
      lost_since_start.push_back(dead_address);
      const sync::Quorum quorum{quorum_base, pipeline->config().net.min_nodes};
      if (quorum_base > 0 && !quorum.holds(peers.size())) {
        throw sync::CutOffError(quorum.cut_off_message(lost_since_start, e.what()));
      }
      const std::size_t new_rank = rank > dead ? rank - 1 : rank;
      // What the default rule would say: a view it allows is the job's; one only net.min_nodes
      // allows (a half of a split) tags its files (MembershipView::file_tag).
      const bool majority =
          sync::Quorum{quorum_base > 0 ? quorum_base : nodes, std::nullopt}.holds(peers.size());
      membership.earlier_views += pipeline->fault_counters();
      pipeline.reset();  // closes this view's transport and waits for a checkpoint write
      views.push_back(View{enter_view(options, membership, root, membership.view + 1, peers,
                                      new_rank, *from, majority),
                           peers.size()});
      ++membership.rollbacks;
      spdlog::warn(
          "peer rank {} ({}) is gone ({}): rolling back to the newest checkpoint in {} "
          "and going on with {} nodes; this node is rank {} of them (view {})",
          dead, dead_address, e.what(), from->string(), peers.size(), new_rank, membership.view);
    }
  }
}

}  // namespace

void run_with_recovery(NodeOptions options, const std::function<void(Pipeline&)>& configure) {
  MembershipView membership;
  std::optional<Pipeline> pipeline;  // the view running now: a failure reports its figures
  try {
    run_views(std::move(options), configure, membership, pipeline);
  } catch (const std::exception& e) {
    // A node cut off from the majority writes nothing, not even its failure.
    if (pipeline && dynamic_cast<const sync::CutOffError*>(&e) == nullptr)
      record_failure(*pipeline, membership, e);
    throw;
  }
}

}  // namespace gradmesh::app

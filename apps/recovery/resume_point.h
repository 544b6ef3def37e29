#pragma once
// Where a resumed job goes on from (README "Checkpoints and resume"; Poseidon arXiv'15 sec. 4.4:
// "the entire distributed system can be restarted from the last checkpoint exactly"): the nodes
// agree on the newest checkpoint every one of them holds, check it was written by this job's
// config, and, when it was written by a job of another node count, re-split it over this one
// (apps/recovery/resplit.h).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "apps/config/job_config.h"
#include "apps/recovery/checkpoint_file.h"
#include "engine/checkpoint.h"
#include "sync/resume/resume_agreement.h"
#include "sync/sync_stage.h"

namespace gradmesh::app {

/// The checkpoint a resumed node loads, agreed by every node.
struct ResumePoint {
  Checkpoint checkpoint;  ///< this node's sections (re-split ones when resplit_from_nodes != 0)
  std::string source;     ///< its path (or the old job's paths), for errors and the log
  /// The node count of the job that wrote it when other than this job's (0: the same): its cursor
  /// and plan are rewritten by adapt_resplit() before loading.
  std::size_t resplit_from_nodes = 0;
};

/// --resume `dir`: exchanges (through `agreement`, every node at once) the iterations of each
/// node's checkpoints that verify, takes the newest common one and checks it fits this job: its
/// node count and rank, and `config` (only the keys outside JobConfig::training_text() may
/// differ). When the newest checkpoint in `dir` was written by a job of another node count, every
/// node of that job must be readable under `dir`, the strategy one that rolls back
/// (StrategyTraits::rolls_back), and the result is re-split over `nodes` (resplit_checkpoint(),
/// by replica where the strategy's traits say so). Warns once per file that does not verify
/// (skipped). Throws CheckpointError naming the folder or path (no common iteration, a header of
/// another job), ConfigError naming the keys that changed, PeerError as ResumeAgreement::exchange.
[[nodiscard]] ResumePoint agree_on_resume(const std::filesystem::path& dir, std::size_t rank,
                                          std::size_t nodes, const JobConfig& config,
                                          sync::ResumeAgreement& agreement);

/// A re-split point's cursor and plan, rewritten for this job before loading: the iterations done
/// rescaled to `per_epoch` (rescale_iteration: the same epoch, the same fraction of it), and the
/// "sync" section replaced by `stage`'s own state (this job's plan: loading it re-shards the KV
/// chunks), or, for a strategy that re-splits by replica, kept (the old rank's) and the stage
/// told (SyncStage::prepare_resplit). Throws CheckpointError when the point has no cursor
/// section. Requires point.resplit_from_nodes != 0.
void adapt_resplit(ResumePoint& point, std::uint64_t per_epoch, sync::SyncStage& stage);

}  // namespace gradmesh::app

#pragma once
// Resuming a job on another node count (issue 13; README "Checkpoints and resume"): the pieces
// that turn the checkpoints of n_old nodes at one iteration into one node's checkpoint of a job of
// n_new nodes. Pure functions of their arguments, no I/O.

#include <cstdint>
#include <span>
#include <vector>

#include "apps/recovery/checkpoint_file.h"

namespace gradmesh::app {

/// The iteration of a job with `per_epoch_new` iterations per epoch that stands where iteration
/// `done` of a job with `per_epoch_old` stood: the same epoch, and the same fraction of it,
/// rounded to the nearest iteration (a fraction that rounds up to a whole epoch starts the next).
/// Both per-epoch counts >= 1, else gradmesh::ContractError.
[[nodiscard]] std::uint64_t rescale_iteration(std::uint64_t done, std::uint64_t per_epoch_old,
                                              std::uint64_t per_epoch_new);

/// The optimizer state of a job from the velocities its n_old nodes saved (each the whole model,
/// Model::parameters() layout, floats): element by element, the value of the largest magnitude
/// (the first such on ties). Exact for every scheme at an iteration boundary: a layer stepped on
/// every node (SFB, all-reduce, local) has the same velocity everywhere; a PS KV chunk's velocity
/// is its owner's, and every other node's is 0 there (KvShard::reload zeroes it, and only the
/// owner steps a chunk). Throws gradmesh::ContractError when `velocities` is empty or sizes
/// differ.
[[nodiscard]] std::vector<float> merge_velocities(std::span<const std::vector<float>> velocities);

/// How a re-split treats the old nodes' replicas (sync::StrategyTraits::resplit_by_replica).
enum class ResplitKind {
  kOneModel,   ///< BSP: one model at an iteration boundary, the velocities merged
  kByReplica,  ///< local: each node's replica, optimizer and stage state its own
};

/// One node's checkpoint for a job of `nodes` nodes from `old` (the checkpoints of every node of
/// the job that wrote them, rank order, one iteration).
///   - kOneModel: section "model" from rank 0 (under BSP every replica is equal at an iteration
///     boundary), "optimizer" merged by merge_velocities(), "cursor" and "sync" from rank 0 (the
///     caller rewrites them for the new job: rescale the cursor, save the new plan);
///   - kByReplica: "model", "optimizer" and "sync" from rank `rank` if the old job had it, else
///     from rank 0 (a copy of its replica: the stage is told, SyncStage::prepare_resplit), and
///     "cursor" from rank 0;
/// and any other section (a user's state) from rank `rank` if the old job had it, else from rank
/// 0. The header says `rank`, `nodes` and the old iteration. Throws CheckpointError naming
/// `source` when a section is missing or malformed.
[[nodiscard]] Checkpoint resplit_checkpoint(std::span<const Checkpoint> old, std::size_t rank,
                                            std::size_t nodes, const std::string& source,
                                            ResplitKind kind = ResplitKind::kOneModel);

}  // namespace gradmesh::app

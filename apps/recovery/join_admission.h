#pragma once
// The survivors' side of a rejoin at a checkpoint boundary (apps/recovery/join_request.h; README
// "When a peer fails"): which filed join requests every node of the view takes in.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/recovery/join_request.h"
#include "sync/resume/resume_agreement.h"

namespace gradmesh::app {

/// At the checkpoint boundary of `iteration`, on every node of view `view` at once: reads the
/// join requests under `root` (the job's checkpoint.dir), exchanges those from addresses that are
/// not live members (`members`: every node's "host:port", by rank) through `agreement` (round
/// `iteration`), and returns their union, sorted by address: the same joiners on every node. Rank
/// 0 refuses (in writing, once) a request from a live member's address, and, when `last` (the
/// job's last iteration: no boundary left to admit them at), every joiner; then none is returned.
/// Thread safety: the node's thread. Throws PeerError as ResumeAgreement::exchange, CheckpointError
/// for a refusal that cannot be written.
[[nodiscard]] std::vector<JoinRequest> admit_join_requests(const std::filesystem::path& root,
                                                           const std::vector<std::string>& members,
                                                           std::size_t rank, std::uint64_t view,
                                                           std::uint64_t iteration, bool last,
                                                           sync::ResumeAgreement& agreement);

}  // namespace gradmesh::app

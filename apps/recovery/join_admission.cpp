#include "apps/recovery/join_admission.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace gradmesh::app {

std::vector<JoinRequest> admit_join_requests(const std::filesystem::path& root,
                                             const std::vector<std::string>& members,
                                             std::size_t rank, std::uint64_t view,
                                             std::uint64_t iteration, bool last,
                                             sync::ResumeAgreement& agreement) {
  std::vector<JoinRequest> seen;
  for (JoinRequest& request : read_join_requests(root)) {
    const auto live = std::find(members.begin(), members.end(), request.address);
    if (live == members.end()) {
      seen.push_back(std::move(request));
    } else if (rank == 0 && !find_join_refusal(root, request)) {
      const std::size_t live_rank = static_cast<std::size_t>(live - members.begin());
      spdlog::warn(
          "a join request from {} refused: rank {} of view {} has that address and is live",
          request.address, live_rank, view);
      write_join_refusal(root, request,
                         "rank " + std::to_string(live_rank) + " of view " + std::to_string(view) +
                             " has the address " + request.address + " and is live");
    }
  }
  // Every node decides on the union of what each has seen: the same joiners everywhere.
  std::vector<JoinRequest> joiners =
      merge_join_requests(agreement.exchange(encode_join_requests(seen), iteration));
  if (joiners.empty() || !last) return joiners;
  std::string who;
  for (const JoinRequest& j : joiners) who += (who.empty() ? "" : ", ") + j.address;
  spdlog::warn("{} asked to rejoin, but iteration {} is the job's last: refused", who, iteration);
  if (rank == 0) {
    for (const JoinRequest& j : joiners) {
      write_join_refusal(root, j,
                         "the job ended at iteration " + std::to_string(iteration) +
                             " before a checkpoint boundary could take this node back");
    }
  }
  return {};
}

}  // namespace gradmesh::app

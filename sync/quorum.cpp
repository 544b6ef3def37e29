#include "sync/quorum.h"

namespace gradmesh::sync {

std::string Quorum::cut_off_message(const std::vector<std::string>& lost,
                                    const std::string& last) const {
  std::string peers;
  for (const std::string& p : lost) peers += (peers.empty() ? "" : ", ") + p;
  const std::string count =
      std::to_string(lost.size()) + " of the " + std::to_string(members) + " nodes it ran with";
  const std::string rule =
      min_nodes ? "going on needs net.min_nodes = " + std::to_string(*min_nodes) + " live nodes"
                : "going on needs more than half of them (" + std::to_string(needed()) + ")";
  return std::string(min_nodes ? "too few nodes left" : "cut off from the majority") +
         ": this node lost contact with " + peers + " (" + count + "; last: " + last + "); " +
         rule +
         ", so this node stops and writes no metrics or checkpoints; the job goes on "
         "without it if the others are enough (restart it with --rejoin to take it back)";
}

}  // namespace gradmesh::sync
